-- rw_release.lua: gives up everything a token has on a lease lock: its write or read hold,
-- and its waiting-writer announcement (so a cancelled or dropped wait leaves at once).
-- KEYS: see rw_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token
-- ARGV[4] "0": never hand the lock to a waiting writer (quorum mode), just wake everyone
-- Reply: 1 if the token held the lock (a live lease) until this call, else 0.

-- Fast paths, when no writer waits (no `wq`), so there is nobody to hand the lock to and no
-- announcement to withdraw: the live writer releases (the record goes, everyone is woken), or
-- a reader does while there is no writer record at all (its entry goes; the last live reader
-- wakes everyone). The same as the general logic from those states.
do
  local v = redis.call('GET', W)
  if v then
    local dl, tok = string.match(v, '^(%d+)|(.+)$')
    if tok == ARGV[3] and tonumber(dl) > NOW and redis.call('EXISTS', WQ) == 0 then
      redis.call('DEL', W)
      redis.pcall(PUBLISH_CMD, CH, '*')
      return 1
    end
  elseif redis.call('EXISTS', WQ) == 0 then
    local dl = redis.call('ZSCORE', R, ARGV[3])
    if not dl then return 0 end
    redis.call('ZREM', R, ARGV[3])
    if tonumber(dl) <= NOW then return 0 end
    if redis.call('ZCOUNT', R, '(' .. NOW, '+inf') == 0 then
      redis.pcall(PUBLISH_CMD, CH, '*')
    end
    return 1
  end
end
-- @general
local token = ARGV[3]
local may_hand_over = ARGV[4] ~= '0'

local wtok = live_writer()
if wtok == token then
  -- The common case: a granted writer has no reader entry and no announcement left (the
  -- grant removed it). The lock goes straight to the next waiting writer, if any.
  redis.call('DEL', W)
  if not (may_hand_over and hand_over()) then wake_all() end
  return 1
end

-- An expired record of ours is cleaned up; it was no longer a hold.
local v = redis.call('GET', W)
if v and string.sub(v, -(#token + 1)) == '|' .. token then redis.call('DEL', W) end

local held = 0
local live, dl = live_reader(token)
if dl then
  redis.call('ZREM', R, token)
  if live then
    held = 1
    if live_count(R) == 0 and not (may_hand_over and hand_over()) then wake_all() end
  end
end

leave_waiting(token)
return held
