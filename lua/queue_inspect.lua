-- queue_inspect.lua: read-only view of a ticket queue, filtered by the server's now.
-- KEYS: see queue_common.lua.
-- ARGV[1] now   ARGV[2] publish command (unused)
-- Reply: {now, fence, permits or -1, {holder_member, remaining_ms, ...},
--         {waiter_member, ticket, heartbeat_remaining_ms, ...}}; holders in sorted-set order,
--         waiters in ticket order, dead waiters (heartbeat lapsed) left out.
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
local kind, cap = stored_capacity()
if kind ~= '' then cap = -1 end -- markers are not a stored permit count
return { NOW, read_counter(FENCE), cap, holders, waiters }
