-- rw_release.lua: gives up everything a token has on a lease lock: its write or read hold,
-- and its waiting-writer announcement (so a cancelled or dropped wait leaves at once).
-- KEYS: see rw_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token
-- ARGV[4] "0": never hand the lock to a waiting writer (quorum mode), just wake everyone
-- Reply: 1 if the token held the lock (a live lease) until this call, else 0.
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
