-- rw_downgrade.lua: turns a live write hold into a read hold in one step, so no other writer
-- can get in between.
-- KEYS: see rw_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] lease_ms (of the read hold)
-- Reply: {1, fence} (the fence of the write just left), or {0, 0} if the token held no live
--        write lease.
local token, lease = ARGV[3], tonumber(ARGV[4])

local wtok = live_writer()
if wtok ~= token then return { 0, 0 } end
local fence = read_counter(FENCE)
redis.call('DEL', W)
redis.call('ZADD', R, NOW + lease, token)
expire_zset(R)
keep_fence(FENCE, NOW + lease)
wake_all()
return { 1, fence }
