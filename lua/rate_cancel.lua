-- rate_cancel.lua: removes a waiter's place from a rate limiter's queue (a timed-out or
-- dropped acquire); the new head, if the head left, is woken by name.
-- KEYS: see rate_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] permits
-- Reply: 1 if the token had a live place until this call, else 0.

local member = member_of(ARGV[3], tonumber(ARGV[4]))
local head_before = head_at_start()
-- An empty queue holds no place: nothing to remove, nothing to prune (rate_common.lua).
if not head_before then return 0 end
prune(head_before)
local had = redis.call('ZREM', RQ, member)
redis.call('ZREM', RHB, member)
settle_queue(head_before, member)
return had
