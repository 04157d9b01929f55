-- rate_inspect.lua: read-only view of a rate limiter, filtered by the server's now.
-- KEYS: see rate_common.lua.
-- ARGV[1] now   ARGV[2] publish command (unused)   ARGV[3] count   ARGV[4] period_ms
-- ARGV[5] burst
-- Reply: {now, available, next_ms, {waiter_member, heartbeat_remaining_ms, ...}}:
--        available = single admissions that fit now one after the other (nobody waiting),
--        next_ms = ms until the next single admission fits (0: now); waiters in ticket
--        order, dead ones (heartbeat lapsed) left out.

local count, period, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local tat_ms, tat_frac = read_tat(count)
read_counter(RTK)
local used = (tat_ms - NOW) * count + tat_frac
local available = math.floor((burst * period - used) / period)
if available < 0 then available = 0 end
local ms, frac = advance(tat_ms, tat_frac, 1, count, period)
local next_ms = math.max(0, wait_for(ms, frac, count, period, burst))
local waiters = {}
local rows = redis.call('ZRANGE', RQ, 0, -1)
for i = 1, #rows do
  local hb = redis.call('ZSCORE', RHB, rows[i])
  if hb and tonumber(hb) > NOW then
    waiters[#waiters + 1] = rows[i]
    waiters[#waiters + 1] = tonumber(hb) - NOW
  end
end
return { NOW, available, next_ms, waiters }
