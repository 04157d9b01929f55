-- rw_acquire.lua: one attempt to take a lease lock (Mutex, RwLock writer or reader).
-- KEYS: see rw_common.lua (w, r, wq, fence, ch).
-- ARGV[1] now ("" = server clock)   ARGV[2] publish command
-- ARGV[3] token        unique per acquisition; a retry with the same token is idempotent
-- ARGV[4] mode         "w" exclusive (writer or mutex), "r" shared (reader)
-- ARGV[5] lease_ms     length of the lease granted, from the server's now
-- ARGV[6] policy       "writer": waiting writers hold back new readers; "reader": they do not
-- ARGV[7] wait         "1": a refused writer under the writer policy announces itself in wq
-- ARGV[8] heartbeat_ms how long that announcement lives unless the writer attempts again
-- Reply: fence (an integer) granted, for lease_ms (fence: the new token for a writer, the
--        last writer's for a reader); {0, retry_ms, -1, announced_until} refused (retry_ms: when the
--        blocking lease ends, -1 when only a wake-up or the waiter's own interval can tell;
--        announced_until: the announcement's heartbeat deadline in server ms, -1 when the
--        claim did not announce itself; a hand-off to this claim names the same deadline).
--        Error RLMIXED when the ticket queue of the same name has a live holder.

-- Fast path: a claim on a free lock, with no writer record (live or not), reader, waiting
-- writer or ticket-queue holder: one EXISTS answers, and the grant is made without the
-- helpers below. The same as the general logic from that state.
if redis.call('EXISTS', W, R, WQ, QH) == 0 then
  local lease = tonumber(ARGV[5])
  -- The lease's own digits where they are the TTL: a number passed to a command is
  -- formatted on every call.
  local ttl = ARGV[5]
  if TTL_PAD ~= 0 or not lease or lease < 1 then ttl = math.max(1, lease) + TTL_PAD end
  if ARGV[4] == 'w' then
    -- next_fence and keep_fence (prelude.lua), inline: no helper is defined yet here.
    local fence = redis.call('GET', FENCE) or '0'
    if not string.find(fence, '^%-?%d+$') then
      error({ err = 'RLCORRUPT key ' .. FENCE .. ' does not hold a redis-locks counter' })
    end
    fence = math.max(tonumber(fence) + 1, NOW_US)
    redis.call('SET', FENCE, string.format('%d', fence), 'PX', ttl)
    redis.call('SET', W, string.format('%d|%s', NOW + lease, ARGV[3]), 'PX', ttl)
    return fence
  elseif ARGV[4] == 'r' then
    local fence = redis.call('GET', FENCE) or '0'
    if not string.find(fence, '^%-?%d+$') then
      error({ err = 'RLCORRUPT key ' .. FENCE .. ' does not hold a redis-locks counter' })
    end
    redis.call('ZADD', R, NOW + lease, ARGV[3])
    redis.call('PEXPIRE', R, ttl)
    -- keep_fence (prelude.lua), inline.
    if fence ~= '0' and redis.call('PEXPIRE', FENCE, ttl, 'GT') == 0 then
      redis.call('PEXPIRE', FENCE, ttl, 'NX')
    end
    return tonumber(fence)
  end
end
-- @general
local token, mode = ARGV[3], ARGV[4]
local lease, policy = tonumber(ARGV[5]), ARGV[6]
local wait, heartbeat = ARGV[7] == '1', tonumber(ARGV[8])

local wtok, wdl = live_writer()

if mode == 'w' then
  if wtok == token then
    -- Already ours (a retry after a lost reply): renewed (regranted_until), same fence.
    local fence = read_counter(FENCE)
    local deadline = regranted_until(wdl, lease)
    set_writer(token, deadline)
    keep_fence(FENCE, deadline)
    return fence
  end
  local retry = nil
  -- The common free lock has no readers, no ticket-queue holders and no waiting writers: one
  -- EXISTS answers for all three (and the checks below then have nothing to look at).
  local others = wtok == nil and redis.call('EXISTS', R, QH, WQ) > 0
  if wtok then
    retry = wdl - NOW
  elseif others and live_count(R) > 0 then
    retry = max_score(R) - NOW
  end
  if retry then
    local announced = -1
    if wait and policy == 'writer' then
      announced = odd(NOW + heartbeat)
      redis.call('ZADD', WQ, announced, token)
      expire_zset(WQ)
    end
    return { 0, retry, -1, announced }
  end
  if others then
    if queue_held() then
      -- An acquire that ends in an error leaves no trace: a stale announcement would hold
      -- back readers and could even be handed the lock.
      leave_waiting(token)
      return mixed_reply()
    end
    -- Leave the waiting writers first: it is also the first touch of `wq`, so a foreign value
    -- there fails the script before the grant is written.
    if policy == 'writer' and redis.call('ZREM', WQ, token) == 1 then expire_zset(WQ) end
  end
  local fence = next_fence(FENCE, NOW + lease)
  set_writer(token, NOW + lease)
  return fence
end

if mode == 'r' then
  if wtok then
    return { 0, wdl - NOW, -1, -1 }
  end
  prune()
  local mine = redis.call('ZSCORE', R, token)
  if not mine and policy == 'writer' and redis.call('ZCARD', WQ) > 0 then
    return { 0, -1, -1, -1 }
  end
  if not mine and queue_held() then return mixed_reply() end
  local fence = read_counter(FENCE)
  -- A reader already (a retry after a lost reply): renewed, never shortened.
  local deadline = NOW + lease
  if mine then deadline = renewed_until(tonumber(mine), lease, 'keep') end
  redis.call('ZADD', R, deadline, token)
  expire_zset(R)
  keep_fence(FENCE, deadline)
  return fence
end

return redis.error_reply('RLARG unknown mode ' .. tostring(mode))
