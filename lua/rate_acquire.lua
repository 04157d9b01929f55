-- rate_acquire.lua: one decision of a rate limiter (GCRA, see rate_common.lua). Only the head
-- of the queue (or a caller when nobody waits) is admitted, so waiters are admitted in arrival
-- order and a request for n at the head is never overtaken by smaller ones behind it.
-- KEYS: see rate_common.lua.
-- ARGV[1] now ("" = server clock)   ARGV[2] publish command
-- ARGV[3] token      unique per acquisition; its queue place is found by it
-- ARGV[4] permits    admissions asked for at once (1 ..= burst)
-- ARGV[5] count      admissions per period
-- ARGV[6] period_ms
-- ARGV[7] burst      most admitted at once
-- ARGV[8] heartbeat_ms  a waiter is dropped when it has not attempted for this long
-- ARGV[9] wait       "1": join the queue when refused (or heartbeat the place); "0": never
--                    stay queued
-- Reply: {1, at} admitted at server time at (now; or, for a token admitted within its
--        heartbeat window before, that earlier admission: a retry after a lost reply);
--        {0, retry_ms, position, heartbeat_until} refused: retry_ms = when the request fits
--        if everyone ahead is admitted in turn (exact for the head and with nobody waiting;
--        -1 for a queued waiter behind the head, which the server wakes by name when it
--        becomes the head), position = waiters ahead (-1 when not queued),
--        heartbeat_until = the queue place's deadline (-1 when not queued).
--        Error RLPERMITS when permits is not 1 ..= burst (the caller's place, if any, is
--        removed).

local token, permits = ARGV[3], tonumber(ARGV[4])
local count, period, burst = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local heartbeat, wait = tonumber(ARGV[8]), ARGV[9] == '1'
local member = member_of(token, permits)
local head_before = head_at_start()

prune(head_before)
redis.call('ZREMRANGEBYSCORE', RA, '-inf', NOW)
local tat_ms, tat_frac = read_tat(count)

-- The caller leaves the queue (`in_queue`: it may stand in it) and the queue settles. A
-- queue that was empty when the step began holds nobody, so its keys are not touched: a step
-- that begins on an empty queue uses `rhb` and `rtk` only to join (see rate_common.lua).
local function leave(in_queue)
  if not head_before then return end
  if in_queue then
    redis.call('ZREM', RQ, member)
    redis.call('ZREM', RHB, member)
  end
  settle_queue(head_before, member)
end

if permits < 1 or permits > burst then
  leave(true)
  return redis.error_reply('RLPERMITS asked for ' .. permits .. ' permits of ' .. burst)
end

-- A retry of an admitted request (its reply was lost): the same admission, nothing more.
-- Kept until the admission's own heartbeat window ends (a retry has the same claim, so the
-- same heartbeat: the admission time is that end minus it).
local admitted_until = redis.call('ZSCORE', RA, member)
if admitted_until then
  leave(false)
  return { 1, tonumber(admitted_until) - heartbeat }
end

local position, ahead = nil, 0
if head_before then
  position = redis.call('ZRANK', RQ, member)
  if not position then position = nil end
  ahead = position or redis.call('ZCARD', RQ)
end

if ahead == 0 then
  local ms, frac = advance(tat_ms, tat_frac, permits, count, period)
  if wait_for(ms, frac, count, period, burst) <= 0 then
    write_tat(ms, frac, count)
    redis.call('ZADD', RA, NOW + heartbeat, member)
    extend_ttl(RA, NOW + heartbeat)
    leave(true)
    return { 1, NOW }
  end
end

-- Refused. The estimate: everyone ahead admitted in turn, then this request.
local weights = permits
if ahead > 0 then
  for _, m in ipairs(redis.call('ZRANGE', RQ, 0, ahead - 1)) do weights = weights + weight_of(m) end
end
-- Capped so that the arithmetic stays exact (below 2^53) however long the queue: a hint only.
if weights > 64000000 then weights = 64000000 end
local ms, frac = advance(tat_ms, tat_frac, weights, count, period)
local retry = math.max(1, wait_for(ms, frac, count, period, burst))

if not wait then
  leave(position ~= nil)
  return { 0, retry, -1, -1 }
end

-- The caller's heartbeat entry is written before its place: on a queue that was empty, this
-- is the step's first use of `rhb`, so a foreign value there fails the step before it wrote
-- anything. Its ticket is then taken from the counter, whose INCR fails on a foreign value
-- (only a queue that was empty has not had it read already): the entry is taken back, and
-- the step leaves nothing either.
local heartbeat_until = NOW + heartbeat
redis.call('ZADD', RHB, heartbeat_until, member)
if not position then
  local ticket = redis.pcall('INCR', RTK)
  if type(ticket) == 'table' then
    redis.call('ZREM', RHB, member)
    corrupt_counter(RTK)
  end
  redis.call('ZADD', RQ, ticket, member)
  position = ahead
end
settle_queue(head_before, member)
if position > 0 then retry = -1 end
return { 0, retry, position, heartbeat_until }
