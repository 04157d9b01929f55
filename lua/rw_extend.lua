-- rw_extend.lua: renews a live hold (write or read) to a fresh lease from the server's now.
-- KEYS: see rw_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] lease_ms
-- ARGV[5] mode  "w": renew the token's write hold only; "r": its read hold only (so a late
--               renewal of a write hold cannot touch the read hold a downgrade made of it)
-- ARGV[6] "keep": the deadline becomes the later of now + lease and the deadline held (an
--         extend, a resume's or an automatic renewal: one may land late, after another
--         client's resume set a longer lease, and must not cut that lease); digits: a
--         hand-off's claim, naming the deadline the hand-off gave (see renewed_until)
-- Reply: 1 if renewed; 0 if the token holds nothing live (lease lapsed or released): the
--        holder must then treat the lock as lost.
local token, lease, mode = ARGV[3], tonumber(ARGV[4]), ARGV[5]

if mode == 'w' then
  local holder, held_until = live_writer()
  if holder ~= token then return 0 end
  local deadline = renewed_until(held_until, lease, ARGV[6])
  set_writer(token, deadline)
  keep_fence(FENCE, deadline)
  return 1
end
local live, held_until = live_reader(token)
if live then
  -- Never handed over: a reader's claim keeps, as a renewal does.
  local deadline = renewed_until(tonumber(held_until), lease, 'keep')
  redis.call('ZADD', R, 'XX', deadline, token)
  expire_zset(R)
  keep_fence(FENCE, deadline)
  return 1
end
return 0
