-- raise_fence.lua: quorum mode. Raises a lock's fence counter to at least a fence that a
-- majority of the servers granted, so a server that lagged (restarted empty, or missed
-- grants) never hands out a smaller fence later. Never lowers it.
-- KEYS[1] fence  counter of the lock
-- ARGV[1] now (unused)   ARGV[2] publish command (unused)
-- ARGV[3] fence  the value to reach, a whole number
-- Reply: the counter after the call.
local target = ARGV[3]
if not string.match(target or '', '^%d+$') then
  return redis.error_reply('RLARG the fence to raise to must be a whole number')
end
local current = read_counter(KEYS[1])
if current < tonumber(target) then
  redis.call('SET', KEYS[1], target)
  return tonumber(target)
end
return current
