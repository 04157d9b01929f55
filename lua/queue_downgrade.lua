-- queue_downgrade.lua: turns a live exclusive hold (weight = capacity) into a one-permit hold
-- (the fair RwLock's write -> read) in one step, then admits the waiters that now fit, so no
-- writer can get in between.
-- KEYS: see queue_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] weight (exclusive)
-- ARGV[5] lease_ms (of the shared hold)   ARGV[6] heartbeat_ms   ARGV[7] capacity (as in queue_acquire.lua)
-- Reply: {1, fence} or {0, 0} when the token held no live exclusive lease.
local token, weight = ARGV[3], tonumber(ARGV[4])
local lease, heartbeat = tonumber(ARGV[5]), tonumber(ARGV[6])
local cap = capacity(ARGV[7])

prune()
if not redis.call('ZSCORE', H, member_of(token, weight)) then return { 0, 0 } end
local fence = read_counter(FENCE)
redis.call('ZREM', H, member_of(token, weight))
hold_until(member_of(token, 1), NOW + lease)
promote(cap, heartbeat, nil)
refresh_ttls()
return { 1, fence }
