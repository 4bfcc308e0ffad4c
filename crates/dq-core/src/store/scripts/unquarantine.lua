-- unquarantine.lua: put a quarantined record back (dq-checker quarantine restore): the raw bytes as the
-- job's record again, and the id back in the structure it was found in, when that is known. A record
-- that still cannot be decoded goes back to the quarantine at its next read.
--
-- KEYS[1]: the partition's quarantine (<prefix>:quarantine)
-- KEYS[2]: the job's record key (<prefix>:job:<id>)
-- ARGV[1]: the id
-- Returns: 1 restored, 0 not in the quarantine, -1 the id has a record again (left quarantined).

local quarantine, job, id = KEYS[1], KEYS[2], ARGV[1]
local entry = redis.call('HGET', quarantine, id)
if not entry then return 0 end
if redis.call('EXISTS', job) == 1 then return -1 end
local nl = string.find(entry, '\n', 1, true)
local score, source = string.match(string.sub(entry, 1, nl - 1), '^%d+ (%S+) (%S+)$')
-- A structure named by the quarantine is read before the first write (see architecture.md).
if source ~= '-' then redis.call('EXISTS', source) end
redis.call('SET', job, string.sub(entry, nl + 1))
if source ~= '-' and score ~= '-' then redis.call('ZADD', source, score, id) end
redis.call('HDEL', quarantine, id)
return 1
