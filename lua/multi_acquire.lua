-- multi_acquire.lua: one all-or-nothing attempt to take several lease locks (a multi-lock).
-- KEYS: the six keys of rw_common.lua for each part, part i at KEYS[6*i-5 .. 6*i]; the
--       parts are distinct locks (all in one hash slot on Redis Cluster).
-- ARGV[1] now, ARGV[2] publish command (prelude.lua)
-- ARGV[3] token    one token for every part; a retry with the same token is idempotent
-- ARGV[4] lease_ms lease of every part, from the server's now
-- ARGV[5] policy   "writer": a read part is refused while writers wait; "reader": it is not
-- ARGV[6] modes    one letter per part: "w" exclusive, "r" shared
-- Reply: {fence_1, ..., fence_n} when every part is granted (the new fence of a write part,
--        the last writer's of a read part); {-1, part, retry_ms} refused, nothing granted
--        (part: the first busy one, 1-based; retry_ms: when its blocking lease ends, -1 when
--        unknown); {-2, part} the part's name is held through the ticket queue.
-- A refused multi-lock never announces itself as a waiting writer: it waits for wake-ups of
-- the busy part and attempts again (so it holds back no reader while it waits).

local token, lease, policy, modes = ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local n = #modes
if n == 0 or #KEYS ~= 6 * n then
  return redis.error_reply('RLARG ' .. #KEYS .. ' keys for ' .. n .. ' parts')
end

-- Points the rw_common.lua helpers at part i.
local function part(i)
  local o = 6 * (i - 1)
  W, R, WQ, FENCE, CH, QH = KEYS[o + 1], KEYS[o + 2], KEYS[o + 3], KEYS[o + 4], KEYS[o + 5], KEYS[o + 6]
end

-- First pass: the same checks as rw_acquire.lua, granting nothing. It also reads every key the
-- second pass writes (a key of a foreign type fails the script here), so that pass cannot
-- fail half-way and leave some parts granted.
local counters = {}
for i = 1, n do
  part(i)
  local mode = string.sub(modes, i, i)
  local wtok, wdl = live_writer()
  counters[i] = read_counter(FENCE)
  if mode == 'w' then
    if wtok ~= token then
      if wtok then return { -1, i, wdl - NOW } end
      if live_count(R) > 0 then return { -1, i, max_score(R) - NOW } end
      if queue_held() then return { -2, i } end
    end
  elseif mode == 'r' then
    if wtok then return { -1, i, wdl - NOW } end
    prune()
    if not redis.call('ZSCORE', R, token) then
      if policy == 'writer' and redis.call('ZCARD', WQ) > 0 then return { -1, i, -1 } end
      if queue_held() then return { -2, i } end
    end
  else
    return redis.error_reply('RLARG unknown mode ' .. mode)
  end
end

-- Second pass: every part is free for this token; grant them all.
local fences = {}
for i = 1, n do
  part(i)
  if string.sub(modes, i, i) == 'w' then
    local holder, held = live_writer()
    local deadline = NOW + lease
    if holder == token then
      -- Already ours (a retry after a lost reply): renewed (regranted_until).
      deadline = regranted_until(held, lease)
      fences[i] = counters[i]
      keep_fence(FENCE, deadline)
    else
      fences[i] = next_fence(FENCE, deadline)
    end
    set_writer(token, deadline)
  else
    fences[i] = counters[i]
    local deadline = NOW + lease
    local held = redis.call('ZSCORE', R, token)
    if held then deadline = renewed_until(tonumber(held), lease, 'keep') end
    redis.call('ZADD', R, deadline, token)
    expire_zset(R)
    keep_fence(FENCE, deadline)
  end
end
return fences
