-- queue_acquire.lua: one attempt to take permits from a ticket queue. Joins the queue (or
-- heartbeats an existing place in it) when refused and asked to wait. Only the head of the
-- queue is ever granted, so the order among live waiters is exactly the ticket order.
-- KEYS: see queue_common.lua (h, q, hb, tk, fence, ch, cap).
-- ARGV[1] now ("" = server clock)   ARGV[2] publish command
-- ARGV[3] token         unique per acquisition; a retry with the same token is idempotent
-- ARGV[4] weight        permits wanted (1; n for acquire_many; the capacity for exclusive)
-- ARGV[5] lease_ms      lease of the grant, from the server's now
-- ARGV[6] heartbeat_ms  a waiter is dropped when it has not attempted for this long
-- ARGV[7] capacity      "<n>": a Semaphore of n permits (a count stored by set_permits wins);
--                       "=<n>": a fixed capacity (FairLock 1, fair RwLock 2^30)
-- ARGV[8] wait          "1": join the queue when refused; "0": never stay queued
-- Reply: fence (an integer) granted, for lease_ms (fence: new when exclusive, else the last
--        exclusive grant's); {0, retry_ms, position, heartbeat_until} refused, position = waiters
--        ahead (-1 when not queued), retry_ms = when the first holder's lease ends, for the
--        head of the queue (-1 otherwise), heartbeat_until = the queue place's heartbeat deadline in server
--        ms (-1 when not queued; a grant made to this place later names the same deadline).
--        Error RLMIXED when the lease lock of the same name has a live holder, RLCAPACITY
--        when the queue is in use with another capacity (either way the caller's queue place,
--        if any, is removed).

-- Fast path: a claim on an empty queue (no holder, waiter or ticket counter) of a name the
-- lease lock does not use either, whose capacity marker is absent or already the one this
-- claim would leave (the marker outlives the last holder, so the common re-acquire of a
-- FairLock or Semaphore finds it): one EXISTS and one GET answer, and the grant is made
-- without the helpers below, leaving what the general logic would (a new marker with the
-- lease's TTL, or the same marker's TTL lengthened only). The same as the general logic from
-- that state.
local EXISTING = redis.call('EXISTS', H, Q, HB, TK, LW, LR)
if EXISTING == 0 then
  local weight, want = tonumber(ARGV[4]), tonumber(string.match(ARGV[7], '%d+$'))
  local mark = (string.sub(ARGV[7], 1, 1) == '=' and '=' or '~') .. (want or '')
  local cap = redis.call('GET', CAP)
  if weight and want and weight >= 1 and weight <= want and (not cap or cap == mark) then
    local lease = tonumber(ARGV[5])
    -- The lease's own digits where they are the TTL (as in rw_acquire.lua's fast path).
    local ttl = ARGV[5]
    if TTL_PAD ~= 0 or not lease or lease < 1 then ttl = math.max(1, lease) + TTL_PAD end
    -- read_counter, next_fence and keep_fence (prelude.lua), inline: no helper is defined yet
    -- here.
    local fence = redis.call('GET', FENCE) or '0'
    if not string.find(fence, '^%-?%d+$') then
      error({ err = 'RLCORRUPT key ' .. FENCE .. ' does not hold a redis-locks counter' })
    end
    fence = tonumber(fence)
    if weight >= want then
      fence = math.max(fence + 1, NOW_US)
      redis.call('SET', FENCE, string.format('%d', fence), 'PX', ttl)
    elseif fence > 0 then
      if redis.call('PEXPIRE', FENCE, ttl, 'GT') == 0 then
        redis.call('PEXPIRE', FENCE, ttl, 'NX')
      end
    end
    local member = ARGV[3]
    if weight ~= 1 then member = member .. '#' .. weight end
    redis.call('ZADD', H, NOW + lease, member)
    redis.call('PEXPIRE', H, ttl)
    if cap then
      redis.call('PEXPIRE', CAP, ttl, 'GT')
    else
      redis.call('SET', CAP, mark, 'PX', ttl)
    end
    return fence
  end
end
-- Fast path: a claim on a queue in use, from a holder (a promoted waiter claiming its grant,
-- or a retry), or from a waiting claim refused (joining the queue or heartbeating its place
-- there), when no holder's lease and no waiter's heartbeat lapsed, the capacity is settled (the
-- marker this claim would leave, or a Semaphore's stored count) and, for a waiter, the lease
-- lock does not use the name and no permit is free (so no one can be promoted). Decided on
-- reads only, then answered with the writes and the reply of the general logic from that state
-- (its prune, capacity_for and promote change nothing there), without its helpers; anything
-- else falls through to it before any write.
if EXISTING > 0 then
  repeat
    local weight, want = tonumber(ARGV[4]), tonumber(string.match(ARGV[7], '%d+$'))
    local lease, heartbeat = tonumber(ARGV[5]), tonumber(ARGV[6])
    if not (weight and want and lease and heartbeat) or weight < 1 or weight % 1 ~= 0 then
      break
    end
    local rows = redis.call('ZRANGE', H, 0, -1, 'WITHSCORES')
    local member = ARGV[3]
    if weight ~= 1 then member = member .. '#' .. weight end
    local used, first, held, lapsed = 0, nil, nil, false
    for i = 1, #rows, 2 do
      local dl = tonumber(rows[i + 1])
      if dl <= NOW then lapsed = true end
      if rows[i] == member then held = dl end
      used = used + tonumber(string.match(rows[i], '#(%d+)$') or 1)
      if not first or dl < first then first = dl end
    end
    if lapsed or #redis.call('ZRANGEBYSCORE', HB, '-inf', NOW) > 0 then break end
    -- The capacity, as capacity_for finds it when it leaves no new marker.
    local fixed = string.sub(ARGV[7], 1, 1) == '='
    local c = redis.call('GET', CAP)
    local cap = nil
    if c == (fixed and '=' or '~') .. want then
      cap = want
    elseif not fixed and c and string.match(c, '^%d+$') then
      cap = tonumber(c)
    end
    if not cap or weight > cap then break end
    if held then
      -- @fast claim
      -- Already granted: claimed with the full lease (read_counter, regranted_until,
      -- hold_until and refresh_ttls, inline).
      local fence = redis.call('GET', FENCE) or '0'
      if not string.find(fence, '^%-?%d+$') then
        error({ err = 'RLCORRUPT key ' .. FENCE .. ' does not hold a redis-locks counter' })
      end
      -- A claim of the window the grant gave (odd, as a waiter's heartbeat deadline) takes
      -- now + lease; a hold renewed since (even) keeps the later deadline.
      local deadline = NOW + lease
      if deadline % 2 == 1 then deadline = deadline + 1 end
      if held % 2 == 0 and held > deadline then deadline = held end
      redis.call('ZADD', H, deadline, member)
      local ttl = math.max(1, math.floor(deadline - NOW)) + TTL_PAD
      if redis.call('PEXPIRE', H, ttl, 'NX') == 0 then redis.call('PEXPIRE', H, ttl, 'GT') end
      if redis.call('PEXPIRE', FENCE, ttl, 'GT') == 0 then
        redis.call('PEXPIRE', FENCE, ttl, 'NX')
      end
      redis.call('PEXPIRE', CAP, ttl, 'GT')
      return tonumber(fence)
    end
    if ARGV[8] ~= '1' or used < cap then break end
    local rank = redis.call('ZRANK', Q, member)
    local ahead = nil
    if not rank then ahead = redis.call('ZCARD', Q) end
    if redis.call('EXISTS', LW, LR) > 0 then break end
    -- @fast waiter
    if not rank then
      local ticket = redis.pcall('INCR', TK)
      if type(ticket) == 'table' then break end -- the general logic reports the foreign value
      redis.call('ZADD', Q, ticket, member)
      rank = ahead -- every ticket queued is below the new one
    end
    local until_ms = NOW + heartbeat
    if until_ms % 2 == 0 then until_ms = until_ms + 1 end
    redis.call('ZADD', HB, until_ms, member)
    -- refresh_ttls after a queue that only grew: the waiters' keys live until the latest
    -- heartbeat deadline, and the capacity marker at least as long.
    local top = tonumber(redis.call('ZRANGE', HB, -1, -1, 'WITHSCORES')[2])
    -- Formatted once: a number passed to a command is formatted on every call.
    local ttl = string.format('%d', math.max(1, math.floor(top - NOW)) + TTL_PAD)
    redis.call('PEXPIRE', HB, ttl)
    redis.call('PEXPIRE', Q, ttl)
    redis.call('PEXPIRE', TK, ttl)
    redis.call('PEXPIRE', CAP, ttl, 'GT')
    local retry = -1
    if rank == 0 and first then retry = first - NOW end
    return { 0, retry, rank, until_ms }
  until true
end
-- @general
local token, weight = ARGV[3], tonumber(ARGV[4])
local lease, heartbeat = tonumber(ARGV[5]), tonumber(ARGV[6])
local wait = ARGV[8] == '1'
local member = member_of(token, weight)

prune(true)
local cap, refusal = capacity_for(ARGV[7])
if not cap then
  if redis.call('ZREM', Q, member) == 1 then
    redis.call('ZREM', HB, member)
    QUEUE_SHRANK = true
  end
  refresh_ttls()
  return refusal
end

if weight < 1 or weight > cap then
  CAP_MARK = nil -- a refused claim leaves no marker
  redis.call('ZREM', Q, member)
  redis.call('ZREM', HB, member)
  QUEUE_SHRANK = true
  promote(cap, heartbeat, nil)
  refresh_ttls()
  return redis.error_reply('RLPERMITS asked for ' .. weight .. ' permits of ' .. cap)
end

-- Already granted (a retry after a lost reply, or a grant made by promote while we waited):
-- claim it with the full lease (regranted_until).
local granted_until = holder_deadline(member)
if granted_until then
  local fence = read_counter(FENCE)
  hold_until(member, regranted_until(granted_until, lease))
  refresh_ttls()
  return fence
end

-- The place in the queue (0 at the head), or false: both "queued?" and, for a waiter already
-- queued, its position at the end (less the waiters ahead promote grants).
local queued = redis.call('ZRANK', Q, member)
if lease_held() then
  -- The name is held through the lease lock: leave the queue and say so.
  if queued then
    redis.call('ZREM', Q, member)
    redis.call('ZREM', HB, member)
    QUEUE_SHRANK = true
  end
  refresh_ttls()
  return redis.error_reply('RLMIXED lease: the name is held through the lease lock')
end
if not queued then
  if redis.call('ZCARD', Q) == 0 and permits_used() + weight <= cap then
    local fence
    if weight >= cap then
      fence = next_fence(FENCE, NOW + lease)
      FENCE_UNTIL = NOW + lease
    else
      fence = read_counter(FENCE)
    end
    hold_until(member, NOW + lease)
    refresh_ttls()
    return fence
  end
  if not wait then
    return { 0, -1, -1, -1 }
  end
  redis.call('ZADD', Q, incr_counter(TK), member)
end
local heartbeat_until = odd(NOW + heartbeat)
redis.call('ZADD', HB, heartbeat_until, member)
QUEUE_GREW = true

-- Permits may be free for the head (a holder just expired, a waiter ahead just died).
if promote(cap, heartbeat, member) then
  local fence = read_counter(FENCE)
  hold_until(member, NOW + lease)
  refresh_ttls()
  return fence
end
refresh_ttls()
-- At the head, the claim waits only for holders: the first of their leases to end is when it
-- may fit (a dead holder's lease runs out with no release to wake the waiter).
local position, retry = nil, -1
if queued then position = queued - PROMOTED else position = redis.call('ZRANK', Q, member) end
if position == 0 then
  local first = first_holder_deadline()
  if first then retry = first - NOW end
end
return { 0, retry, position, heartbeat_until }
