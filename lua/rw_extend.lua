-- rw_extend.lua: renews a live hold (write or read) to a fresh lease from the server's now.
-- KEYS: see rw_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] lease_ms
-- ARGV[5] mode  "w": renew the token's write hold only; "r": its read hold only (so a late
--               renewal of a write hold cannot touch the read hold a downgrade made of it)
-- ARGV[6] "set": the deadline becomes now + lease (an extend, a resume); "keep": the later of
--         that and the deadline held (an automatic renewal, which may land late: after
--         another client's resume set a longer lease, it must not cut that lease)
-- Reply: 1 if renewed; 0 if the token holds nothing live (lease lapsed or released): the
--        holder must then treat the lock as lost.
local token, lease, mode = ARGV[3], tonumber(ARGV[4]), ARGV[5]
local keep = ARGV[6] == 'keep'

if mode == 'w' then
  local holder, held_until = live_writer()
  if holder ~= token then return 0 end
  local deadline = NOW + lease
  if keep and held_until > deadline then deadline = held_until end
  set_writer(token, deadline)
  keep_fence(FENCE, deadline)
  return 1
end
if live_reader(token) then
  if keep then
    redis.call('ZADD', R, 'XX', 'GT', NOW + lease, token)
  else
    redis.call('ZADD', R, 'XX', NOW + lease, token)
  end
  expire_zset(R)
  keep_fence(FENCE, NOW + lease)
  return 1
end
return 0
