-- rate_common.lua: state helpers of the rate limiter, prepended after prelude.lua to every
-- rate_*.lua script. See docs/decisions/rate-limiter.md.
--
-- KEYS (the same for every rate_* script):
--   KEYS[1] rt   string "<tat_ms>|<frac>|<count>": the theoretical arrival time (GCRA) is
--                tat_ms + frac/count ms (0 <= frac < count); expires when it is reached
--   KEYS[2] rq   zset waiter member -> ticket (tickets from KEYS[4])
--   KEYS[3] rhb  zset waiter member -> heartbeat deadline
--   KEYS[4] rtk  ticket counter; deleted whenever the queue is empty
--   KEYS[5] ch   wake-up channel of the name
--   KEYS[6] ra   zset admitted member -> the end of its claim's heartbeat window after the
--                admission (each admission keeps its own window, whatever the heartbeat of
--                the claims that prune), so that a retry after a lost reply finds its
--                admission instead of being admitted again
-- A member is the waiter's token, followed by "#<n>" when it asks for n > 1 admissions.
-- A limiter of `count` per `period` ms with burst `burst` admits n at NOW when
--   tat' = max(tat, NOW) + n * period / count <= NOW + burst * period / count,
-- and stores tat'. Every quantity is an integer below 2^53 (count, burst <= 10^6, period <=
-- one day), so the arithmetic is exact.

local RT, RQ, RHB, RTK, CH, RA = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

-- The stored tat as (ms, frac) in units of 1/count ms, never earlier than NOW. A tat stored
-- under another count is rounded up to the next whole ms (it can only delay, never admit more).
local function read_tat(count)
  local v = redis.call('GET', RT)
  if not v then return NOW, 0 end
  local ms, frac, c = string.match(v, '^(%d+)|(%d+)|(%d+)$')
  ms, frac, c = tonumber(ms), tonumber(frac), tonumber(c)
  if not ms or not c or c < 1 or frac >= c then
    error({ err = 'RLCORRUPT key ' .. RT .. ' does not hold a rate limiter state' })
  end
  if c ~= count and frac > 0 then ms, frac = ms + 1, 0 end
  if ms < NOW then return NOW, 0 end
  return ms, frac
end

-- tat advanced by `weight` admissions of period/count ms each. The floor of f / count is exact:
-- f <= 5.6e15 (weight <= 6.4e7, capped by the callers; period <= 8.64e7 ms), so near the
-- quotient doubles are at most 1.25/count apart, and a quotient that is not an integer is at
-- least 1/count from the next one: more than half that spacing, so it never rounds up to it.
local function advance(ms, frac, weight, count, period)
  local f = frac + weight * period
  local carry = math.floor(f / count)
  return ms + carry, f - carry * count
end

-- Ms from NOW until an admission that leaves tat at (ms, frac) fits (<= 0: it fits now).
local function wait_for(ms, frac, count, period, burst)
  return ms - math.floor((burst * period - frac) / count) - NOW
end

local function write_tat(ms, frac, count)
  redis.call('SET', RT, string.format('%d|%d|%d', ms, frac, count), 'PX', ms - NOW + 1 + TTL_PAD)
end

-- The first waiter's member, or nil.
local function head()
  return redis.call('ZRANGE', RQ, 0, 0)[1]
end

-- The first waiter's member at the start of a step, or nil. A queue in use has a ticket
-- counter, which the step deletes if it leaves the queue empty: the counter is read first, so
-- a foreign value there fails the step (RLCORRUPT, WRONGTYPE) before anything is written, and
-- is kept. A step that begins on an empty queue touches neither the counter nor `rhb` unless
-- its caller joins the queue (there is nobody to remove or prune), and a joining caller
-- writes its `rhb` entry before its place and takes it back if the counter's INCR fails
-- (rate_acquire.lua): a foreign value at either fails that step with nothing written.
local function head_at_start()
  local h = head()
  if h then read_counter(RTK) end
  return h
end

-- The head prune found with a heartbeat entry (nil when it found none or did not look).
local LIVE_HEAD = nil

-- The first waiter with a heartbeat entry, dropping the members before it that have none (a
-- lost `rhb` entry or key, a member someone else added): no deadline says they are alive, and
-- only at the head could they hold anyone back (only the head is admitted), so they go when
-- they reach it. The lock queue treats such a head as lapsing too, by another road: it grants
-- it a hold for one claim window (queue_common.lua, promote), which ends as a lapsed
-- heartbeat does. A limiter cannot grant on trust: an admission is charged to the rate for
-- good, so the member is dropped, as a waiter whose heartbeat lapsed is; a typed error would
-- instead stop every step of the name until someone deleted the member by hand. `h`: the
-- head, if known; `known`: a member known to have an entry (a step removes a waiter's entry
-- only with its place, and adds the caller's own before settling).
local function live_head(h, known)
  if h == nil then h = head() end
  while h and h ~= LIVE_HEAD and h ~= known and not redis.call('ZSCORE', RHB, h) do
    redis.call('ZREM', RQ, h)
    h = head()
  end
  return h
end

-- Drops the waiters whose heartbeat lapsed, wherever they stand, and the members without a
-- heartbeat entry at the head (live_head). `head_before`: the head before (head_at_start);
-- an empty queue has nothing to prune.
local function prune(head_before)
  if not head_before then return end
  local dead = redis.call('ZRANGEBYSCORE', RHB, '-inf', NOW)
  if #dead > 0 then
    zrem_all(RQ, dead)
    redis.call('ZREMRANGEBYSCORE', RHB, '-inf', NOW)
    LIVE_HEAD = live_head()
  else
    LIVE_HEAD = live_head(head_before)
  end
end

-- After a step that changed the queue: it lives as long as its latest heartbeat deadline,
-- the ticket counter goes with the last waiter (tickets restart from 1; a queue that was
-- empty when the step began has no counter of its own to delete), and a new head other than
-- `self_member` is woken by name: its turn may have come.
local function settle_queue(head_before, self_member)
  local now_head = live_head(nil, self_member)
  if not now_head then
    if head_before then redis.call('DEL', RQ, RHB, RTK) end
    return
  end
  local top = max_score(RHB)
  expire_at(RQ, top)
  expire_at(RHB, top)
  expire_at(RTK, top)
  if now_head ~= head_before and now_head ~= self_member then
    publish(CH, token_of(now_head))
  end
end
