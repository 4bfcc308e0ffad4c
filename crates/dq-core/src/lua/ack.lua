-- ack.lua: finish a reserved job: it is done, kept for lookups for the retention period.
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- KEYS[3]: counts hash (<prefix>:counts)
-- ARGV[1]: id   ARGV[2]: receipt   ARGV[3]: done retention in ms (0 = delete the record now)
-- Returns: 1 acked, 0 no such job, -1 stale receipt (the reservation it names is over; nothing changed).

local job, reserved, counts = KEYS[1], KEYS[2], KEYS[3]
local r = rec_load(job)
if not r then return 0 end
if r.s ~= 'reserved' or r.rc ~= ARGV[2] then return -1 end
redis.call('ZREM', reserved, ARGV[1])
redis.call('HINCRBY', counts, r.t .. ':reserved', -1)
local retention = tonumber(ARGV[3])
if retention > 0 then
  r.s = 'done'
  rec_store(job, r, true)
  redis.call('PEXPIRE', job, retention)
else
  redis.call('DEL', job)
end
return 1
