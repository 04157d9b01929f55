-- queue_set_permits.lua: changes the stored permit count in one step (so concurrent relative
-- changes all count); current holds stay, new grants follow it.
-- KEYS: see queue_common.lua.
-- ARGV[1] now   ARGV[2] publish command
-- ARGV[3] change        "=<n>": n permits; "+<n>": n more; "-<n>": n fewer
-- ARGV[4] base          the count a relative change starts from while no count is stored (the
--                       asking Semaphore handle's own; a capacity marker is not a stored count)
-- ARGV[5] heartbeat_ms  claim window of the waiters this change grants
-- Reply: the new count. The `cap` key has no TTL: a stored count is configuration, and
--        outlives the holders (documented).
--        Error RLPERMITS "count <n> out of range" when the new count would be below 1 or above
--        MAX_PERMITS (nothing changes); RLCAPACITY while a FairLock or fair RwLock uses the
--        queue.
local MAX_PERMITS = 1048576
local op, n = string.match(ARGV[3] or '', '^([=+-])(%d+)$')
local base, heartbeat = tonumber(ARGV[4]), tonumber(ARGV[5])
if not op or not base or not heartbeat then
  return redis.error_reply('RLARG a permit change is "=<n>", "+<n>" or "-<n>", a base count and a heartbeat')
end
n = tonumber(n)

local kind, stored = stored_capacity() -- a foreign value at `cap` fails here, before any write
local from = base
if kind == '' then from = stored end
local permits = n
if op == '+' then permits = from + n elseif op == '-' then permits = from - n end
if permits < 1 or permits > MAX_PERMITS then
  return redis.error_reply('RLPERMITS count ' .. string.format('%d', permits) .. ' out of range')
end

prune()
-- A FairLock or fair RwLock using the queue has a fixed capacity: no count may be stored.
if kind == '=' and in_use() then return capacity_conflict(stored .. ' (fixed)', permits) end
redis.call('SET', CAP, permits)
promote(permits, heartbeat, nil)
refresh_ttls()
return permits
