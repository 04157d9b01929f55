-- election_proclaim.lua: the leader of an election (the holder of its one-permit ticket queue)
-- sets or retracts the value it leads with, and tells the observers.
-- KEYS[1] h      the ticket queue's holders (zset member -> lease deadline), read only
-- KEYS[2] lv     the leader's value: "<token>|<fence>|<value>", alive as long as the leader's
--                lease (queue_extend.lua lengthens it): replaced by the next proclaim, deleted
--                by a retract, and read only while its token is a live holder, so a value left
--                by a dead leader is never reported
-- KEYS[3] ch     the wake-up channel
-- KEYS[4] fence  the fence counter, read only: while a one-permit holder lives no other grant
--                can take a fence, so the counter is the holder's fence
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] "p" proclaim or "r" retract
-- ARGV[5] value (proclaim)
-- Reply: 1 if the token is the live holder (and the value is set, or retracted), else 0
-- (nothing changes). Publishes "^" on the channel when the value changed.
local H, LV, CH, FENCE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token = ARGV[3]
-- Read every key first, so a key of a foreign type fails the step before it writes.
local current = redis.call('GET', LV)
local fence = read_counter(FENCE)
local deadline = redis.call('ZSCORE', H, token)
if not deadline or tonumber(deadline) <= NOW then return 0 end
if ARGV[4] == 'p' then
  local ttl = math.max(1, math.floor(tonumber(deadline) - NOW)) + TTL_PAD
  redis.call('SET', LV, token .. '|' .. string.format('%d', fence) .. '|' .. ARGV[5], 'PX', ttl)
elseif current and string.sub(current, 1, #token + 1) == token .. '|' then
  redis.call('DEL', LV)
else
  return 1
end
publish(CH, '^')
return 1
