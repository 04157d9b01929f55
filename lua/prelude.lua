-- prelude.lua: helpers prepended to every script of redis-locks (see src/scripts.rs).
--
-- Conventions shared by every script:
--   ARGV[1]  "" to use the server clock (TIME), or an explicit time in ms. An explicit time is
--            for deterministic tests only (the model checks drive a virtual clock through
--            it): every command is sent as under the server clock, but each key TTL is a day
--            longer (TTL_PAD), so no key expires under a virtual clock and the stored
--            deadlines alone decide.
--   ARGV[2]  the publish command for wake-ups: "PUBLISH", or "SPUBLISH" on Redis Cluster.
-- (A script's plain form, which a single server runs, has the server clock and PUBLISH
-- written in and reads its step's arguments from ARGV[1]: src/wire/scripts.rs.)
-- Every deadline is stored inside the lock state (a value or a sorted-set score) and compared
-- with `now`; key TTLs only clean up after abandoned locks, so correctness never depends on them.
-- A hold or heartbeat with deadline D is live while now < D.

-- NOW_US: the same clock in microseconds, the floor of every exclusive grant's fence.
local NOW, NOW_US, TTL_PAD
if ARGV[1] ~= nil and ARGV[1] ~= '' then
  NOW = tonumber(ARGV[1])
  NOW_US = NOW * 1000
  TTL_PAD = 86400000
else
  -- Each string is converted once: a tonumber of a string costs as much as a command.
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  NOW = s * 1000 + math.floor(us / 1000)
  NOW_US = s * 1000000 + us
  TTL_PAD = 0
end
local PUBLISH_CMD = ARGV[2]

-- A waiter's heartbeat deadline (which a hand-off gives the hold it grants) is odd, and every
-- deadline an extend or renewal writes is even: a hand-off's claim finds the deadline still
-- equal to the hand-off's only if nothing extended the hold since (see renewed_until).
local function odd(ms)
  if ms % 2 == 0 then return ms + 1 end
  return ms
end

-- The deadline an extend or a renewal ("keep") or a hand-off's claim (the deadline the
-- hand-off gave, in digits) gives a hold whose deadline is `held`: "keep" the later of now +
-- lease and `held`, so no request that lands late (after another client's resume set a
-- longer lease) can cut it; a claim now + lease while the hold still has the hand-off's
-- deadline (the window, possibly longer than the lease), else "keep": a claim that lands
-- after another client's resume cannot cut that resume's lease either.
local function renewed_until(held, lease, how)
  local deadline = NOW + lease
  if deadline % 2 == 1 then deadline = deadline + 1 end
  if how ~= 'keep' and held == tonumber(how) then return deadline end
  if held > deadline then
    -- Kept, but even as every renewal's deadline: a hand-off's (odd) window kept past a
    -- renewal, another client's resume, must no longer match that hand-off's late claim.
    if held % 2 == 1 then return held + 1 end
    return held
  end
  return deadline
end

-- The deadline a retried grant gives a hold its token already has (an acquire by that token:
-- its earlier reply was lost, or a promoted waiter confirms its hand-off): as a claim naming
-- the deadline held while it is odd (nothing renewed the hold since it was granted), else as
-- a renewal, so a retry that lands after another client's resume cannot cut its lease.
local function regranted_until(held, lease)
  if held % 2 == 1 then return renewed_until(held, lease, held) end
  return renewed_until(held, lease, 'keep')
end

-- Key types are not checked one by one (a TYPE call per key per script was a measurable part
-- of the cost): every script reads or prunes each of its keys before it writes anything that
-- matters, and Redis fails the script with WRONGTYPE at the first command on a key of another
-- type, without touching that key. The worst a type error leaves behind is an expired entry
-- pruned from another key of the same lock, which changes nothing.

local function corrupt_counter(key)
  error({ err = 'RLCORRUPT key ' .. key .. ' does not hold a redis-locks counter' })
end

-- The value of counter `key` (0 when absent). Fails on anything that is not an integer;
-- scripts read a counter before their first write, so a foreign value stops them early.
local function read_counter(key)
  local v = redis.call('GET', key)
  if not v then return 0 end
  if not string.find(v, '^%-?%d+$') then corrupt_counter(key) end
  return tonumber(v)
end

-- The fence of a new exclusive grant on counter `key`, a hold until `deadline` (ms): above
-- every earlier grant's (the counter) and at least the clock in microseconds, so a counter lost
-- with the server's data (a restart without persistence, FLUSHALL, a failover to a replica that
-- missed it, an expired or evicted key) never hands out a smaller fence than one already
-- granted, as long as the new server's clock is not behind the old one's by more than the time
-- between the two grants. The counter then expires with the hold (extensions of an exclusive
-- hold keep it alive, keep_fence), so an idle name leaves no key. Fails with RLCORRUPT on a
-- foreign value.
local function next_fence(key, deadline)
  local v = math.max(read_counter(key) + 1, NOW_US)
  local ttl = math.max(1, math.floor(deadline - NOW)) + TTL_PAD
  redis.call('SET', key, string.format('%d', v), 'PX', ttl)
  return v
end

-- Keeps the fence counter `key` alive at least until `deadline` (ms), if it exists: a hold of
-- its name was granted or renewed, and the counter lives as long as the longest hold. Never
-- shortens its TTL; a counter without one (left by a release before counters expired) gets
-- one. One call when it lengthens the TTL, two otherwise.
local function keep_fence(key, deadline)
  local ttl = math.max(1, math.floor(deadline - NOW)) + TTL_PAD
  if redis.call('PEXPIRE', key, ttl, 'GT') == 0 then redis.call('PEXPIRE', key, ttl, 'NX') end
end

-- How long a counter written by bump_fence lives at least (ms).
local BUMP_KEEP = 1000

-- A fence above every earlier grant's on counter `key`, taken with no new hold (an operator's
-- eviction), so the evicted holder's fence is below every later one. The counter keeps its
-- TTL, and lives at least BUMP_KEEP more, so a grant right after (within the same clock tick)
-- still takes a greater fence.
local function bump_fence(key)
  local v = math.max(read_counter(key) + 1, NOW_US)
  redis.call('SET', key, string.format('%d', v), 'KEEPTTL')
  keep_fence(key, NOW + BUMP_KEEP)
  return v
end

-- INCR of counter `key`, failing with RLCORRUPT (not a bare INCR error) on a foreign value.
-- INCR checks the value itself, so no read is needed first.
local function incr_counter(key)
  local v = redis.pcall('INCR', key)
  if type(v) == 'table' and v.err then corrupt_counter(key) end
  return v
end

-- Sets a TTL so that `key` disappears at `deadline` (ms).
local function expire_at(key, deadline)
  local ttl = math.floor(deadline - NOW)
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', key, ttl + TTL_PAD)
end

-- Makes `key` live at least until `deadline` (ms), never shortening a longer TTL: one call
-- when the key has no TTL yet (it was just created), two otherwise.
local function extend_ttl(key, deadline)
  local ttl = math.floor(deadline - NOW)
  if ttl < 1 then ttl = 1 end
  ttl = ttl + TTL_PAD
  if redis.call('PEXPIRE', key, ttl, 'NX') == 0 then redis.call('PEXPIRE', key, ttl, 'GT') end
end

-- The largest score of a sorted set, or nil when it is empty.
local function max_score(key)
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then return tonumber(top[2]) end
  return nil
end

-- Keeps a sorted set of deadlines alive until its latest deadline.
local function expire_zset(key)
  local top = max_score(key)
  if top then expire_at(key, top) end
end

-- A wake-up is a hint: waiters also retry on their own interval. A publish the user's ACL
-- denies (no channel rights) must not fail a script whose writes are already done, so its
-- error is ignored (pcall); the client warns about the missing rights when it connects.
local function publish(channel, message)
  redis.pcall(PUBLISH_CMD, channel, message)
end


-- A member of a ticket queue or of a rate limiter's queue: the token, followed by "#<n>" when
-- it asks for n > 1 permits (or admissions).
local function member_of(token, weight)
  if weight == 1 then return token end
  return token .. '#' .. weight
end

local function weight_of(member)
  local w = string.match(member, '#(%d+)$')
  if w then return tonumber(w) end
  return 1
end

local function token_of(member)
  local t = string.match(member, '^(.*)#%d+$')
  return t or member
end

-- ZREM of many members, in batches that stay under Lua's unpack limit.
local function zrem_all(key, members)
  local i = 1
  while i <= #members do
    local j = math.min(i + 499, #members)
    redis.call('ZREM', key, unpack(members, i, j))
    i = j + 1
  end
end
