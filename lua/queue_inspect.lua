-- queue_inspect.lua: read-only view of a ticket queue, filtered by the server's now.
-- KEYS: see queue_common.lua.
-- ARGV[1] now   ARGV[2] publish command (unused)
-- Reply: {now, fence, permits or -1, {holder_member, remaining_ms, ...},
--         {waiter_member, ticket, heartbeat_remaining_ms, ...}, cap_foreign}; holders in
--         sorted-set order, waiters in ticket order, dead waiters (heartbeat lapsed) left
--         out; cap_foreign 1 when `cap` holds data redis-locks did not write (another type,
--         or a string that is no capacity), else 0.
-- Report a foreign value at `hb` or `tk` even when the queue is empty.
redis.call('ZCARD', HB)
read_counter(TK)
local holders = {}
local rows = redis.call('ZRANGEBYSCORE', H, '(' .. NOW, '+inf', 'WITHSCORES')
for i = 1, #rows, 2 do
  holders[#holders + 1] = rows[i]
  holders[#holders + 1] = tonumber(rows[i + 1]) - NOW
end
local waiters = {}
rows = redis.call('ZRANGE', Q, 0, -1, 'WITHSCORES')
for i = 1, #rows, 2 do
  local hb = redis.call('ZSCORE', HB, rows[i])
  if hb and tonumber(hb) > NOW then
    waiters[#waiters + 1] = rows[i]
    waiters[#waiters + 1] = tonumber(rows[i + 1])
    waiters[#waiters + 1] = tonumber(hb) - NOW
  end
end
-- `cap` is read without failing: a foreign one (also a count above 2^32 - 1, which no capacity
-- reaches) is reported beside the holders and waiters it would hide, the capacity unknown,
-- where every other step fails on it.
local permits, cap_foreign = -1, 0 -- markers are not a stored permit count
local c = redis.pcall('GET', CAP)
if type(c) == 'table' and c.err then
  cap_foreign = 1
elseif c then
  local kind, n = string.match(c, '^([~=]?)(%d+)$')
  n = tonumber(n)
  if not n or n < 1 or n > 4294967295 then
    cap_foreign = 1
  elseif kind == '' then
    permits = n
  end
end
return { NOW, read_counter(FENCE), permits, holders, waiters, cap_foreign }
