-- queue_set_permits.lua: stores a new permit count; current holds stay, new grants follow it.
-- KEYS: see queue_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] permits   ARGV[4] heartbeat_ms
-- Reply: 1. The `cap` key has no TTL: like the fence, it outlives the holders (documented).
local permits = tonumber(ARGV[3])
local heartbeat = tonumber(ARGV[4])

capacity(permits) -- a foreign value at `cap` fails here, before anything is written
prune()
redis.call('SET', CAP, permits)
promote(permits, heartbeat, nil)
refresh_ttls()
return 1
