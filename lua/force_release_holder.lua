-- force_release_holder.lua: operator's override for one holder. Drops the one live hold whose
-- token starts with the given prefix (the lease lock's writer, one of its readers, or one
-- ticket-queue holder), keeps every other hold and the waiters, and wakes everyone. The fence
-- is bumped when no live hold of that family is left, so the evicted holder's fenced writes
-- are refused; while other holds of the family remain they share its fence (shared grants
-- report the last exclusive grant's), and it is left as it is. Several matches, or none:
-- nothing changes.
-- KEYS[1] w  KEYS[2] r  KEYS[3] h  KEYS[4] fence  KEYS[5] ch
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token prefix (not empty)
-- Reply: {matches, fence, bumped}: the live holds whose token (a ticket-queue member without
-- its `#<weight>`) starts with the prefix, the fence counter after the call, and 1 if this
-- call bumped it. Only with matches = 1 was a hold dropped.
local W, R, H, FENCE, CH = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local PREFIX = ARGV[3]
if PREFIX == nil or PREFIX == '' then
  return redis.error_reply('RLARG the token prefix must not be empty')
end
local fence = read_counter(FENCE)
local function starts(s) return string.sub(s, 1, #PREFIX) == PREFIX end
local found = {}
local w = redis.call('GET', W)
if w then
  local dl, tok = string.match(w, '^(%d+)|(.+)$')
  if not dl then
    error({ err = 'RLCORRUPT key ' .. W .. ' does not hold a redis-locks writer record' })
  end
  if tonumber(dl) > NOW and starts(tok) then found[#found + 1] = { W, tok } end
end
for _, key in ipairs({ R, H }) do
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, '(' .. NOW, '+inf')) do
    if starts(m) then found[#found + 1] = { key, m } end
  end
end
if #found ~= 1 then return { #found, fence, 0 } end
local key, member = found[1][1], found[1][2]
local left = 0
if key == W then
  redis.call('DEL', W)
else
  redis.call('ZREM', key, member)
  left = redis.call('ZCOUNT', key, '(' .. NOW, '+inf')
end
local bumped = 0
if left == 0 then
  fence = bump_fence(FENCE)
  bumped = 1
end
publish(CH, '*')
return { 1, fence, bumped }
