-- queue_common.lua: state helpers of the ticket queue (FairLock, Semaphore, RwLock with the
-- fair policy), prepended after prelude.lua to every queue_*.lua script.
--
-- KEYS (the same for every queue_* script):
--   KEYS[1] h      zset holder member -> lease deadline
--   KEYS[2] q      zset waiter member -> ticket (tickets from KEYS[4], never a client clock)
--   KEYS[3] hb     zset waiter member -> heartbeat deadline
--   KEYS[4] tk     ticket counter; deleted whenever the queue is empty
--   KEYS[5] fence  counter: every exclusive grant takes max(counter + 1, clock in µs) (next_fence)
--   KEYS[6] ch     wake-up channel of the lock
--   KEYS[7] cap    the queue's capacity: "<n>" stored by set_permits (no TTL; every Semaphore
--                  handle follows it; a Semaphore's count, so FairLock and fair RwLock claims
--                  are refused on it), or, while the queue is in use, a marker left by its
--                  claims: "~<n>" (Semaphores of n permits) or "=<n>" (a fixed capacity:
--                  FairLock 1, fair RwLock 2^30), kept alive as long as the holders and waiters
--                  it describes. Claims of another capacity are refused with RLCAPACITY while
--                  the queue is in use; a marker left after that is ignored and replaced, and
--                  lapses at the latest deadline it covered (like the holder set `h`).
--   KEYS[8] w      writer record of the lease lock of the same name (read only: lease_held)
--   KEYS[9] r      readers of the lease lock of the same name (read only: lease_held)
--   KEYS[10] lv    an election's leader value (election_proclaim.lua): queue_extend keeps it
--                  alive as long as the holder's lease
-- A member is the holder's token, followed by "#<weight>" when it takes more than one permit
-- (a semaphore's acquire_many, or the fair RwLock's writer, which takes all of them).
-- A grant is exclusive (and takes a new fence) when its weight is the whole capacity.

local H, Q, HB, TK, FENCE, CH, CAP = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local LW, LR, LV = KEYS[8], KEYS[9], KEYS[10]

-- What this run changed, so that refresh_ttls touches only what needs it: TTLs must grow
-- when a deadline was added or moved later (a holder granted or renewed, a waiter joining or
-- heartbeating); removals never need a longer TTL, only the ticket counter's cleanup.
local H_UNTIL, QUEUE_GREW, QUEUE_SHRANK = nil, false, false

-- The holders as this run last knew them (member -> lease deadline), kept by prune(true) and
-- every change this run makes to `h`, so that permits_used, holder_deadline and
-- first_holder_deadline need no call of their own; nil when not read.
local HOLDERS = nil

-- How many waiters promote granted in this run (each from the head of the queue).
local PROMOTED = 0

-- How many of `q` and `hb` a fast path found (EXISTS), or nil when none looked.
local WAITING = nil

-- The deadline until which this run set the fence counter's TTL (next_fence), so that
-- refresh_ttls does not ask again to keep it alive that long.
local FENCE_UNTIL = nil

-- Records `member` as a holder until `deadline`.
local function hold_until(member, deadline)
  redis.call('ZADD', H, deadline, member)
  if HOLDERS then HOLDERS[member] = deadline end
  if not H_UNTIL or deadline > H_UNTIL then H_UNTIL = deadline end
end

-- Removes `member` (and `other`, if given) from the holders; 1 if any was there, else 0.
local function drop_holder(member, other)
  local n
  if other then n = redis.call('ZREM', H, member, other) else n = redis.call('ZREM', H, member) end
  if HOLDERS then
    HOLDERS[member] = nil
    if other then HOLDERS[other] = nil end
  end
  return math.min(n, 1)
end

-- The lease deadline of holder `member`, or nil (after prune: live holders only).
local function holder_deadline(member)
  if HOLDERS then return HOLDERS[member] end
  local dl = redis.call('ZSCORE', H, member)
  if dl then return tonumber(dl) end
  return nil
end

-- The earliest lease deadline of the holders, or nil when there is none.
local function first_holder_deadline()
  if HOLDERS then
    local first = nil
    for _, dl in pairs(HOLDERS) do
      if not first or dl < first then first = dl end
    end
    return first
  end
  local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) end
  return nil
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

-- The stored capacity as (kind, n): kind '' (set_permits), '~' or '=' (markers); nil if none.
local function stored_capacity()
  local c = redis.call('GET', CAP)
  if not c then return nil, nil end
  local kind, n = string.match(c, '^([~=]?)(%d+)$')
  n = tonumber(n)
  if not n or n < 1 then
    error({ err = 'RLCORRUPT key ' .. CAP .. ' does not hold a permit count' })
  end
  return kind, n
end

-- The capacity in force for a claim already in the queue's state (release, extend, downgrade):
-- the stored one, else the claim's own (`arg` as in capacity_for).
local function capacity(arg)
  local kind, n = stored_capacity()
  return n or tonumber(string.match(arg, '%d+$')), kind
end


-- True while the queue has a live holder or any waiter (after prune).
local function in_use()
  return redis.call('ZCOUNT', H, '(' .. NOW, '+inf') > 0 or redis.call('ZCARD', Q) > 0
end

local function capacity_conflict(stored, asked)
  return redis.error_reply('RLCAPACITY in use with ' .. stored .. ' permits, asked for ' .. asked)
end

-- The marker this run leaves at `cap` if it grants or queues its claim (nil: none needed).
local CAP_MARK = nil

-- The capacity for a new claim that asks for `arg`: "<n>" (a Semaphore, which follows a count
-- stored by set_permits) or "=<n>" (a fixed capacity). Returns the capacity, or nil and the
-- RLCAPACITY reply when the queue is in use with another capacity. Call after prune().
local function capacity_for(arg)
  local fixed = string.sub(arg, 1, 1) == '='
  local want = tonumber(string.match(arg, '%d+$'))
  local kind, n = stored_capacity()
  if kind == '' then
    -- A stored count may change at any set_permits: a fixed capacity cannot live on it.
    if fixed then return nil, capacity_conflict(n .. ' (set_permits, resizable)', want) end
    return n
  end
  if n and n ~= want and in_use() then return nil, capacity_conflict(n, want) end
  -- No marker, a stale one, or one to change: a fixed capacity must not be resized later,
  -- and a fixed marker left by claims that are gone must not keep refusing set_permits.
  if n ~= want or (fixed and kind == '~') or (not fixed and kind == '=' and not in_use()) then
    CAP_MARK = (fixed and '=' or '~') .. want
  end
  return want
end

-- Writes the marker chosen by capacity_for, alive at least until `deadline`. A marker that is
-- replaced (upgraded, or stale) keeps its TTL, which may cover holders beyond `deadline`.
local function mark_capacity(deadline)
  if not CAP_MARK then return end
  local ttl = math.max(1, math.floor(deadline - NOW)) + TTL_PAD
  if redis.call('SET', CAP, CAP_MARK, 'XX', 'KEEPTTL') then
    redis.call('PEXPIRE', CAP, ttl, 'GT')
  else
    redis.call('SET', CAP, CAP_MARK, 'PX', ttl)
  end
  CAP_MARK = nil
end

-- Keeps a capacity marker alive at least until `deadline`; a count stored by set_permits has
-- no TTL and keeps none (PEXPIRE GT leaves a key without TTL as it is).
local function extend_capacity(deadline)
  redis.call('PEXPIRE', CAP, math.max(1, math.floor(deadline - NOW)) + TTL_PAD, 'GT')
end

local function permits_used()
  local used = 0
  if HOLDERS then
    for m in pairs(HOLDERS) do used = used + weight_of(m) end
    return used
  end
  for _, m in ipairs(redis.call('ZRANGE', H, 0, -1)) do used = used + weight_of(m) end
  return used
end

-- Drops holders whose lease lapsed and waiters whose heartbeat lapsed, wherever they stand.
-- With `read_holders` (a step that counts the permits in use anyway), the holders are read
-- once here, in one call that also tells whether any lapsed, and kept in HOLDERS.
local function prune(read_holders)
  if read_holders then
    local rows = redis.call('ZRANGE', H, 0, -1, 'WITHSCORES')
    HOLDERS = {}
    local lapsed = false
    for i = 1, #rows, 2 do
      local dl = tonumber(rows[i + 1])
      if dl <= NOW then lapsed = true else HOLDERS[rows[i]] = dl end
    end
    if lapsed then redis.call('ZREMRANGEBYSCORE', H, '-inf', NOW) end
  else
    redis.call('ZREMRANGEBYSCORE', H, '-inf', NOW)
  end
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
    local claim_until = tonumber(redis.call('ZSCORE', HB, m) or odd(NOW + claim_ms))
    if w >= cap then
      fence = next_fence(FENCE, claim_until)
      FENCE_UNTIL = claim_until
    end
    redis.call('ZREM', HB, m)
    hold_until(m, claim_until)
    QUEUE_SHRANK = true
    PROMOTED = PROMOTED + 1
    if m == self_member then
      self_granted = true
    else
      named[#named + 1] = { token_of(m), claim_until }
    end
  end
  if #named > 0 then
    -- "<token>=<fence>@<deadline>": the message is the grant itself, so a woken waiter can
    -- use it at once and claim its full lease in the background. The deadline is the
    -- waiter's heartbeat deadline, which its latest refused attempt was told: a waiter whose
    -- latest refusal names another deadline cannot tell when the grant was made, and
    -- confirms it with an attempt instead.
    fence = fence or read_counter(FENCE)
    for i = 1, #named do
      named[i] = named[i][1] .. '=' .. string.format('%d', fence) .. '@' .. string.format('%d', named[i][2])
    end
    publish(CH, table.concat(named, ' '))
  end
  return self_granted
end

-- Keeps every key alive at least as long as its latest deadline (a TTL is cleanup only;
-- deadlines decide; the fence counter lives as long as the holders); the ticket counter goes with the last waiter, so tickets restart from 1
-- on an empty queue.
local function refresh_ttls()
  local cap_until = H_UNTIL
  if H_UNTIL then
    extend_ttl(H, H_UNTIL)
    -- A fence taken this run already lives that long (next_fence set its TTL).
    if not (FENCE_UNTIL and FENCE_UNTIL >= H_UNTIL) then keep_fence(FENCE, H_UNTIL) end
  end
  if QUEUE_GREW or QUEUE_SHRANK then
    -- A queue that only grew still holds the waiter it grew by.
    if QUEUE_SHRANK and redis.call('ZCARD', Q) == 0 then
      redis.call('DEL', TK, HB)
    elseif QUEUE_GREW then
      local top = max_score(HB)
      if top then
        expire_at(HB, top)
        expire_at(Q, top)
        expire_at(TK, top)
        if not cap_until or top > cap_until then cap_until = top end
      end
    end
  end
  -- The capacity marker lives as long as the holders and waiters it describes.
  if cap_until then
    if CAP_MARK then mark_capacity(cap_until) else extend_capacity(cap_until) end
  end
end
