-- queue_common.lua: state helpers of the ticket queue (FairLock, Semaphore, RwLock with the
-- fair policy), prepended after prelude.lua to every queue_*.lua script.
--
-- KEYS (the same for every queue_* script):
--   KEYS[1] h      zset holder member -> lease deadline
--   KEYS[2] q      zset waiter member -> ticket (tickets from KEYS[4], never a client clock)
--   KEYS[3] hb     zset waiter member -> heartbeat deadline
--   KEYS[4] tk     ticket counter; deleted whenever the queue is empty
--   KEYS[5] fence  counter, incremented on every exclusive grant; never expires
--   KEYS[6] ch     wake-up channel of the lock
--   KEYS[7] cap    permits set by set_permits (absent: the caller's own count applies)
--   KEYS[8] w      writer record of the lease lock of the same name (read only: lease_held)
--   KEYS[9] r      readers of the lease lock of the same name (read only: lease_held)
-- A member is the holder's token, followed by "#<weight>" when it takes more than one permit
-- (a semaphore's acquire_many, or the fair RwLock's writer, which takes all of them).
-- A grant is exclusive (and takes a new fence) when its weight is the whole capacity.

local H, Q, HB, TK, FENCE, CH, CAP = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local LW, LR = KEYS[8], KEYS[9]

-- What this run changed, so that refresh_ttls touches only what needs it: TTLs must grow
-- when a deadline was added or moved later (a holder granted or renewed, a waiter joining or
-- heartbeating); removals never need a longer TTL, only the ticket counter's cleanup.
local H_UNTIL, QUEUE_GREW, QUEUE_SHRANK = nil, false, false

-- Records `member` as a holder until `deadline`.
local function hold_until(member, deadline)
  redis.call('ZADD', H, deadline, member)
  if not H_UNTIL or deadline > H_UNTIL then H_UNTIL = deadline end
end

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

-- True while the lease lock of this name (Mutex, RwLock with writer or reader preference) has
-- a live holder. The families keep separate state, so every grant of one checks the other (see
-- queue_held in rw_common.lua). Asked at most once per run.
local LEASE_HELD = nil
local function lease_held()
  if LEASE_HELD ~= nil then return LEASE_HELD end
  LEASE_HELD = false
  if redis.call('EXISTS', LW, LR) > 0 then
    local v = redis.call('GET', LW)
    local dl = nil
    if v then dl = tonumber(string.match(v, '^(%d+)|')) end
    LEASE_HELD = (dl ~= nil and dl > NOW) or redis.call('ZCOUNT', LR, '(' .. NOW, '+inf') > 0
  end
  return LEASE_HELD
end

local function capacity(default)
  local c = redis.call('GET', CAP)
  if c then
    local n = tonumber(c)
    if not n or n < 1 then
      error({ err = 'RLCORRUPT key ' .. CAP .. ' does not hold a permit count' })
    end
    return n
  end
  return default
end

local function permits_used()
  local used = 0
  for _, m in ipairs(redis.call('ZRANGE', H, 0, -1)) do used = used + weight_of(m) end
  return used
end

-- Drops holders whose lease lapsed and waiters whose heartbeat lapsed, wherever they stand.
local function prune()
  redis.call('ZREMRANGEBYSCORE', H, '-inf', NOW)
  local dead = redis.call('ZRANGEBYSCORE', HB, '-inf', NOW)
  if #dead > 0 then
    zrem_all(Q, dead)
    redis.call('ZREMRANGEBYSCORE', HB, '-inf', NOW)
    QUEUE_SHRANK = true
    -- Some paths return without refresh_ttls: the ticket counter must go with the last
    -- waiter here already, so tickets restart from 1 on an empty queue.
    if redis.call('ZCARD', Q) == 0 then redis.call('DEL', TK, HB) end
  end
end

-- Grants, in ticket order, every waiter at the head of the queue that fits in the free
-- permits, stopping at the first that does not (a large request is never overtaken). A waiter
-- granted this way holds until its own heartbeat deadline only (`claim_ms` from now if it has
-- none) until it claims the grant with its own acquire, so a waiter that died in the queue
-- blocks others for at most its own heartbeat window. Publishes the granted tokens, except `self_member`'s. Returns true if `self_member`
-- was granted.
local function promote(cap, claim_ms, self_member)
  local free = cap - permits_used()
  local named, self_granted, fence = {}, false, nil
  while free > 0 do
    -- Take the head off the queue in one call; it goes back (same ticket, same place) if it
    -- cannot be granted now.
    local head = redis.call('ZPOPMIN', Q)
    if #head == 0 then break end
    local m = head[1]
    local w = weight_of(m)
    -- Never granted beside a lease-lock holder; the waiter gets RLMIXED on its next attempt.
    if w > free or lease_held() then
      redis.call('ZADD', Q, head[2], m)
      -- If it was the last member, the pop deleted the key and its TTL with it.
      QUEUE_GREW = true
      break
    end
    free = free - w
    -- The grant lasts until the waiter's own heartbeat deadline: a live waiter attempts (and
    -- claims its full lease) before then; a dead one blocks no longer than its own window.
    local claim_until = tonumber(redis.call('ZSCORE', HB, m) or (NOW + claim_ms))
    if w >= cap then fence = incr_counter(FENCE) end
    redis.call('ZREM', HB, m)
    hold_until(m, claim_until)
    QUEUE_SHRANK = true
    if m == self_member then
      self_granted = true
    else
      named[#named + 1] = token_of(m)
    end
  end
  if #named > 0 then
    -- "<token>=<fence>": the message is the grant itself, so a woken waiter can use it at
    -- once (it knows its claim window from its own last heartbeat) and claim its full lease
    -- in the background.
    fence = fence or read_counter(FENCE)
    for i = 1, #named do named[i] = named[i] .. '=' .. fence end
    publish(CH, table.concat(named, ' '))
  end
  return self_granted
end

-- Keeps every key alive at least as long as its latest deadline (a TTL is cleanup only;
-- deadlines decide); the ticket counter goes with the last waiter, so tickets restart from 1
-- on an empty queue.
local function refresh_ttls()
  if H_UNTIL then extend_ttl(H, H_UNTIL) end
  if not (QUEUE_GREW or QUEUE_SHRANK) then return end
  if redis.call('ZCARD', Q) == 0 then
    redis.call('DEL', TK, HB)
  elseif QUEUE_GREW then
    local top = max_score(HB)
    if top then
      expire_at(HB, top)
      expire_at(Q, top)
      expire_at(TK, top)
    end
  end
end
