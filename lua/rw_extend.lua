-- rw_extend.lua: renews a live hold (write or read) to a fresh lease from the server's now.
-- KEYS: see rw_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] lease_ms
-- ARGV[5] mode  "w": renew the token's write hold only; "r": its read hold only (so a late
--               renewal of a write hold cannot touch the read hold a downgrade made of it)
-- Reply: 1 if renewed; 0 if the token holds nothing live (lease lapsed or released): the
--        holder must then treat the lock as lost.
local token, lease, mode = ARGV[3], tonumber(ARGV[4]), ARGV[5]

if mode == 'w' then
  if live_writer() ~= token then return 0 end
  set_writer(token, NOW + lease)
  keep_fence(FENCE, NOW + lease)
  return 1
end
if live_reader(token) then
  redis.call('ZADD', R, 'XX', NOW + lease, token)
  expire_zset(R)
  keep_fence(FENCE, NOW + lease)
  return 1
end
return 0
