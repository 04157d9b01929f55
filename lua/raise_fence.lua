-- raise_fence.lua: quorum mode. Raises a lock's fence counter to at least a fence that a
-- majority of the servers granted, so a server that lagged (restarted empty, or missed
-- grants) never hands out a smaller fence later. Never lowers it. The counter lives at least
-- as long as the grant's lease, like a counter this server set itself.
-- KEYS[1] fence  counter of the lock
-- ARGV[1] now   ARGV[2] publish command (unused)
-- ARGV[3] fence  the value to reach, a whole number
-- ARGV[4] keep   ms the counter lives at least (the grant's lease)
-- Reply: the counter after the call.
local target, keep = ARGV[3], tonumber(ARGV[4])
if not string.match(target or '', '^%d+$') or not keep then
  return redis.error_reply('RLARG the fence to raise to and the time to keep it must be whole numbers')
end
local current = read_counter(KEYS[1])
if current < tonumber(target) then
  redis.call('SET', KEYS[1], target, 'KEEPTTL')
  current = tonumber(target)
end
extend_ttl(KEYS[1], NOW + keep)
return current
