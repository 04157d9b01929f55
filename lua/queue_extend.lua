-- queue_extend.lua: renews a live hold to a fresh lease from the server's now.
-- KEYS: see queue_common.lua.
-- ARGV[1] now   ARGV[2] publish command   ARGV[3] token   ARGV[4] weight   ARGV[5] lease_ms
-- ARGV[6] "keep": the later of now + lease and the deadline held (an extend or a renewal:
--         never shorter); digits: a hand-off's claim (see renewed_until)
-- Reply: 1 if renewed; 0 if the token holds nothing live (the holder must treat it as lost).
local member = member_of(ARGV[3], tonumber(ARGV[4]))
local lease = tonumber(ARGV[5])

prune()
local held_until = redis.call('ZSCORE', H, member)
if not held_until then return 0 end
hold_until(member, renewed_until(tonumber(held_until), lease, ARGV[6]))
-- A leader's value lives as long as its lease (no-op on a name that is not an election).
redis.call('PEXPIRE', LV, math.max(1, lease) + TTL_PAD, 'GT')
refresh_ttls()
return 1
