-- adopt.lua: take in one job converted from the layout of older releases (dq-checker migrate): its record
-- as DUMPed from the old Redis, and its place in the structure its state names. Does nothing when the
-- job is here already, so a conversion that stopped half-way can simply run again.
--
-- KEYS[1]: the job's record (<prefix>:{<tag>}:job:<id>)
-- KEYS[2]: counts hash (<prefix>:{<tag>}:counts)
-- KEYS[3]: the structure its state names (delay set, ready queue, reserved set, dead list); absent for
--          a done job, which is only a record
-- ARGV[1]: id   ARGV[2]: the record's DUMP   ARGV[3]: its remaining time to live in ms (0: none)
-- ARGV[4]: score in the structure   ARGV[5]: counts field (<topic>:<state>, "" for none)
-- Returns: 1 adopted, 0 it was here already.

if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('RESTORE', KEYS[1], tonumber(ARGV[3]), ARGV[2])
if KEYS[3] then redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1]) end
if ARGV[5] ~= '' then redis.call('HINCRBY', KEYS[2], ARGV[5], 1) end
return 1
