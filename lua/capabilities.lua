#!lua
-- capabilities.lua: what the lock scripts need of the server, probed once at connect (not a
-- lock step: no prelude, no lock state). Running at all shows that the server has Lua
-- scripting and script flags on the shebang line; the reply says the rest.
-- KEYS[1] a key of a probe lock under the client's prefix, never created: PEXPIRE of a
--         missing key sets nothing and answers 0, after the server has parsed its options
-- Reply: { seconds, microseconds, pexpire_gt, pexpire_nx }
--   seconds, microseconds  what TIME answers inside a script (the clock of every step)
--   pexpire_gt, pexpire_nx 1 when PEXPIRE accepts that option (the fence keeps its TTL
--                          with them), else the server's error text
local clock = redis.call('TIME')
local function accepts(option)
  local reply = redis.pcall('PEXPIRE', KEYS[1], 1000, option)
  if type(reply) == 'table' and reply.err then
    return tostring(reply.err)
  end
  return 1
end
return { clock[1], clock[2], accepts('GT'), accepts('NX') }
