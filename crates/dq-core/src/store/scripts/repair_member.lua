-- repair_member.lua: the audit found an id in a structure (delay set, ready queue, reserved set, dead
-- list) with no job record: nothing can be delivered, so drop the id. Checked again here, atomically.
--
-- KEYS[1]: the structure (a sorted set)
-- KEYS[2]: the job record the id should have (<prefix>:job:<id>)
-- ARGV[1]: id
-- Returns: 1 removed, 0 nothing to repair.

if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
