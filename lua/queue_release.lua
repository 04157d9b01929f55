-- queue_release.lua: gives up everything a token has on a ticket queue (its hold and its
-- place in the queue), then grants the waiters that now fit.
-- KEYS: see queue_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] weight
-- ARGV[5] heartbeat_ms (claim window for waiters granted here)   ARGV[6] capacity (as in queue_acquire.lua)
-- Reply: 1 if the token held permits (a live lease) until this call, else 0.
-- A hold is released in whatever form it has now: a claim of weight w > 1 also removes the
-- token's one-permit form, which a downgrade (queue_downgrade.lua) turns it into, so a release
-- sent with the claim as it was before a downgrade whose outcome is unknown leaves nothing.

-- Fast path: nobody waits (no queue, no heartbeats): drop the lapsed holders and the caller's
-- hold, as the general logic does from that state; no one is promoted, no TTL grows.
WAITING = redis.call('EXISTS', Q, HB)
if WAITING == 0 then
  redis.call('ZREMRANGEBYSCORE', H, '-inf', NOW)
  local token, weight = ARGV[3], tonumber(ARGV[4])
  if weight == 1 then return redis.call('ZREM', H, token) end
  return math.min(redis.call('ZREM', H, token .. '#' .. weight, token), 1)
end
-- Fast path: someone waits, no holder's lease and no waiter's heartbeat lapsed, the capacity
-- is readable and the lease lock does not use the name: the hold (and a queue place, if the
-- token has one) is dropped and the waiters that now fit are granted from the head, with the
-- writes, wake-up and reply of the general logic from that state (its prune changes nothing
-- there), without its helpers. Decided on reads only; anything else falls through to it
-- before any write.
if WAITING > 0 then
  repeat
    local token, weight = ARGV[3], tonumber(ARGV[4])
    local claim_ms = tonumber(ARGV[5])
    if not (weight and claim_ms) then break end
    local member = token
    if weight ~= 1 then member = token .. '#' .. weight end
    local rows = redis.call('ZRANGE', H, 0, -1, 'WITHSCORES')
    local used, lapsed = 0, false
    for i = 1, #rows, 2 do
      if tonumber(rows[i + 1]) <= NOW then lapsed = true end
      if rows[i] ~= member and rows[i] ~= token then
        used = used + tonumber(string.match(rows[i], '#(%d+)$') or 1)
      end
    end
    if lapsed or #redis.call('ZRANGEBYSCORE', HB, '-inf', NOW) > 0 then break end
    -- capacity(ARGV[6]): the stored count or marker, else the claim's own. The general
    -- logic reads it only when someone is queued: any error here is left to it.
    local c = redis.pcall('GET', CAP)
    if type(c) == 'table' then break end
    local cap
    if c then cap = tonumber(string.match(c, '^[~=]?(%d+)$')) else
      cap = tonumber(string.match(ARGV[6], '%d+$'))
    end
    if not cap or cap < 1 or redis.call('EXISTS', LW, LR) > 0 then break end
    -- @fast hand_off
    local held = math.min(redis.call('ZREM', H, member, token), 1)
    local shrank, grew = false, false
    if redis.call('ZREM', Q, member) == 1 then
      redis.call('ZREM', HB, member)
      shrank = true
    end
    -- promote, inline.
    local free = cap - used
    local named, fence, fence_until, h_until = {}, nil, nil, nil
    while free > 0 do
      local head = redis.call('ZPOPMIN', Q)
      if #head == 0 then break end
      local m = head[1]
      local w = tonumber(string.match(m, '#(%d+)$') or 1)
      if w > free then
        redis.call('ZADD', Q, head[2], m)
        grew = true
        break
      end
      free = free - w
      local claim_until = redis.call('ZSCORE', HB, m)
      if claim_until then
        claim_until = tonumber(claim_until)
      else
        claim_until = NOW + claim_ms
        if claim_until % 2 == 0 then claim_until = claim_until + 1 end
      end
      if w >= cap then
        -- next_fence, inline.
        local v = redis.call('GET', FENCE) or '0'
        if not string.match(v, '^%-?%d+$') then
          error({ err = 'RLCORRUPT key ' .. FENCE .. ' does not hold a redis-locks counter' })
        end
        fence = math.max(tonumber(v) + 1, NOW_US)
        redis.call('SET', FENCE, string.format('%d', fence), 'PX',
          math.max(1, math.floor(claim_until - NOW)) + TTL_PAD)
        fence_until = claim_until
      end
      redis.call('ZREM', HB, m)
      redis.call('ZADD', H, claim_until, m)
      if not h_until or claim_until > h_until then h_until = claim_until end
      shrank = true
      named[#named + 1] = { string.match(m, '^(.*)#%d+$') or m, claim_until }
    end
    if #named > 0 then
      if not fence then
        fence = redis.call('GET', FENCE) or '0'
        if not string.match(fence, '^%-?%d+$') then
          error({ err = 'RLCORRUPT key ' .. FENCE .. ' does not hold a redis-locks counter' })
        end
        fence = tonumber(fence)
      end
      for i = 1, #named do
        named[i] = named[i][1] .. '=' .. string.format('%d', fence) .. '@'
          .. string.format('%d', named[i][2])
      end
      redis.pcall(PUBLISH_CMD, CH, table.concat(named, ' '))
    end
    -- refresh_ttls, inline.
    local cap_until = h_until
    if h_until then
      local ttl = math.max(1, math.floor(h_until - NOW)) + TTL_PAD
      if redis.call('PEXPIRE', H, ttl, 'NX') == 0 then redis.call('PEXPIRE', H, ttl, 'GT') end
      if not (fence_until and fence_until >= h_until) then
        if redis.call('PEXPIRE', FENCE, ttl, 'GT') == 0 then
          redis.call('PEXPIRE', FENCE, ttl, 'NX')
        end
      end
    end
    if shrank and redis.call('ZCARD', Q) == 0 then
      redis.call('DEL', TK, HB)
    elseif grew then
      local top = redis.call('ZRANGE', HB, -1, -1, 'WITHSCORES')[2]
      if top then
        top = tonumber(top)
        local ttl = math.max(1, math.floor(top - NOW)) + TTL_PAD
        redis.call('PEXPIRE', HB, ttl)
        redis.call('PEXPIRE', Q, ttl)
        redis.call('PEXPIRE', TK, ttl)
        if not cap_until or top > cap_until then cap_until = top end
      end
    end
    if cap_until then
      redis.call('PEXPIRE', CAP, math.max(1, math.floor(cap_until - NOW)) + TTL_PAD, 'GT')
    end
    return held
  until true
end
-- @general
local member = member_of(ARGV[3], tonumber(ARGV[4]))
local heartbeat = tonumber(ARGV[5])

prune(true)
local held = drop_holder(member, ARGV[3])
if redis.call('ZREM', Q, member) == 1 then
  redis.call('ZREM', HB, member)
  QUEUE_SHRANK = true
end
-- The capacity matters (and is read) only when someone waits to be promoted. The queue is
-- known to be there when nothing left it in this run and the fast path's EXISTS found it.
if (not QUEUE_SHRANK and WAITING == 2) or redis.call('EXISTS', Q) == 1 then
  promote(capacity(ARGV[6]), heartbeat, nil)
end
refresh_ttls()
return held
