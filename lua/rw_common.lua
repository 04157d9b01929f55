-- rw_common.lua: state helpers of the lease lock (Mutex and RwLock with writer or reader
-- preference), prepended after prelude.lua to every rw_*.lua script.
--
-- KEYS (the same for every rw_* script):
--   KEYS[1] w      string "<deadline_ms>|<token>": the writer (or mutex holder) and its lease
--   KEYS[2] r      zset reader token -> lease deadline; the read count is its live size
--   KEYS[3] wq     zset waiting writer token -> heartbeat deadline (writer-preference flag)
--   KEYS[4] fence  counter: every exclusive grant takes max(counter + 1, clock in µs) (next_fence)
--   KEYS[5] ch     wake-up channel of the lock
--   KEYS[6] h      holders of the ticket queue of the same name (read only: see queue_held)

local W, R, WQ, FENCE, CH, QH = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

-- Expired readers and waiting writers are not always removed at once: the hot paths (a
-- writer or mutex taking or releasing) count live entries by score instead of pruning, which
-- saves calls; the reader paths prune, and key TTLs clean up the rest. Decisions always look
-- at live entries only.

-- The live writer as (token, deadline), or nil. Fails on a value it did not write.
local function live_writer()
  local v = redis.call('GET', W)
  if not v then return nil, nil end
  local dl, tok = string.match(v, '^(%d+)|(.+)$')
  if not dl then
    error({ err = 'RLCORRUPT key ' .. W .. ' does not hold a redis-locks writer record' })
  end
  dl = tonumber(dl)
  if dl <= NOW then return nil, nil end
  return tok, dl
end

local function set_writer(token, deadline)
  local record = string.format('%d', deadline) .. '|' .. token
  redis.call('SET', W, record, 'PX', math.max(1, math.floor(deadline - NOW)) + TTL_PAD)
end

-- Live readers (lease deadline after now).
local function live_count(key)
  return redis.call('ZCOUNT', key, '(' .. NOW, '+inf')
end

-- True if `token` is a live reader.
local function live_reader(token)
  local dl = redis.call('ZSCORE', R, token)
  return dl ~= false and dl ~= nil and tonumber(dl) > NOW, dl
end

-- True while the ticket queue of this name (FairLock, Semaphore, fair RwLock) has a live
-- holder. The two families keep separate state, so every grant of one checks the other: a
-- name is held through one family at a time, and an acquire that finds the other one gets
-- RLMIXED (see mixed_reply) instead of a second holder.
local function queue_held()
  if redis.call('EXISTS', QH) == 0 then return false end
  return redis.call('ZCOUNT', QH, '(' .. NOW, '+inf') > 0
end

local function mixed_reply()
  return redis.error_reply('RLMIXED queue: the name is held through the ticket queue')
end

-- Wakes every local waiter of this lock.
local function wake_all()
  publish(CH, '*')
end

-- Removes `token`'s waiting-writer announcement, if any; when it was the last live one, the
-- readers it held back are woken.
local function leave_waiting(token)
  if redis.call('ZREM', WQ, token) == 0 then return end
  if live_count(WQ) == 0 then wake_all() else expire_zset(WQ) end
end

-- Hands the free lock to the live waiting writer with the earliest heartbeat deadline (the
-- one that attempted longest ago: live waiters take turns) until that deadline, and wakes it
-- with the grant ("token=fence@deadline"): it holds at once and claims its full lease in the
-- background. The deadline lets the waiter check that the grant came after its latest refused
-- attempt (whose reply carried the same deadline). A writer that died holds it for the rest of
-- its own heartbeat window at most (by default at most its lease). False when no writer waits.
local function hand_over()
  local pick = redis.call('ZRANGE', WQ, '(' .. NOW, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if #pick == 0 then return false end
  -- Never granted beside a ticket-queue holder; the waiter gets RLMIXED on its next attempt.
  if queue_held() then return false end
  local tok, claim_until = pick[1], tonumber(pick[2])
  redis.call('ZREM', WQ, tok)
  local fence = next_fence(FENCE, claim_until)
  set_writer(tok, claim_until)
  expire_zset(WQ)
  publish(CH, tok .. '=' .. string.format('%d', fence) .. '@' .. string.format('%d', claim_until))
  return true
end

-- Drops expired readers and waiting writers whose heartbeat lapsed. When the last waiting
-- writer goes this way, the readers it held back are woken.
local function prune()
  redis.call('ZREMRANGEBYSCORE', R, '-inf', NOW)
  local waiting = redis.call('ZCARD', WQ)
  if waiting > 0 then
    local gone = redis.call('ZREMRANGEBYSCORE', WQ, '-inf', NOW)
    if gone == waiting then wake_all() end
  end
end
