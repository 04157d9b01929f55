-- rw_inspect.lua: read-only view of a lease lock, filtered by the server's now.
-- KEYS: see rw_common.lua.
-- ARGV[1] now   ARGV[2] publish command (unused)
-- Reply: {now, fence, writer_token or "", writer_remaining_ms,
--         {reader_token, remaining_ms, ...}, {waiting_writer_token, heartbeat_remaining_ms, ...}}
--        readers and waiting writers in sorted-set order (deadline, then token).
local wtok, wdl = live_writer()
local function live(key)
  local out = {}
  local rows = redis.call('ZRANGEBYSCORE', key, '(' .. NOW, '+inf', 'WITHSCORES')
  for i = 1, #rows, 2 do
    out[#out + 1] = rows[i]
    out[#out + 1] = tonumber(rows[i + 1]) - NOW
  end
  return out
end
local wrem = 0
if wtok then wrem = wdl - NOW end
return { NOW, read_counter(FENCE), wtok or '', wrem, live(R), live(WQ) }
