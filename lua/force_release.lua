-- force_release.lua: operator's override. Drops every hold of a lock of either kind, keeps the
-- waiters, bumps the fence so the evicted holders' fenced writes are refused, wakes everyone.
-- KEYS[1] w  KEYS[2] r  KEYS[3] h  KEYS[4] fence  KEYS[5] ch
-- ARGV[1] now   ARGV[2] publish command
-- Reply: the new fence.
read_counter(KEYS[4])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local fence = bump_fence(KEYS[4])
publish(KEYS[5], '*')
return fence
