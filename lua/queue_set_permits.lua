-- queue_set_permits.lua: stores a new permit count; current holds stay, new grants follow it.
-- KEYS: see queue_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] permits   ARGV[4] heartbeat_ms
-- Reply: 1. The `cap` key has no TTL: like the fence, it outlives the holders (documented).
--        Error RLCAPACITY while a FairLock or fair RwLock uses the queue.
local permits = tonumber(ARGV[3])
local heartbeat = tonumber(ARGV[4])

local kind, n = stored_capacity() -- a foreign value at `cap` fails here, before any write
prune()
-- A FairLock or fair RwLock using the queue has a fixed capacity: no count may be stored.
if kind == '=' and in_use() then return capacity_conflict(n .. ' (fixed)', permits) end
redis.call('SET', CAP, permits)
promote(permits, heartbeat, nil)
refresh_ttls()
return 1
