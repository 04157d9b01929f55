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
