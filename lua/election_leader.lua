-- election_leader.lua: the election's leader as the store sees it now, read only.
-- KEYS[1] h   KEYS[2] lv   KEYS[3] ch (unused)   KEYS[4] fence   (see election_proclaim.lua)
-- ARGV[1] now   ARGV[2] publish command (unused)
-- Reply: {now} when nobody leads (no value; or the token that proclaimed it holds no live
-- lease: it resigned, died or was evicted, or the next holder has not proclaimed yet; or the
-- value is of an earlier grant of the same token: its fence is no longer the counter, which
-- is the live one-permit holder's fence); {now, fence, remaining_ms, value} when the live
-- holder proclaimed `value` under its current grant.
local H, LV, FENCE = KEYS[1], KEYS[2], KEYS[4]
local current = redis.call('GET', LV)
if not current then return { NOW } end
local token, fence, value = string.match(current, '^([^|]*)|(%d+)|(.*)$')
if not token then
  error({ err = 'RLCORRUPT key ' .. LV .. ' does not hold a redis-locks leader value' })
end
local deadline = redis.call('ZSCORE', H, token)
if not deadline or tonumber(deadline) <= NOW then return { NOW } end
if tonumber(fence) ~= read_counter(FENCE) then return { NOW } end
return { NOW, tonumber(fence), tonumber(deadline) - NOW, value }
