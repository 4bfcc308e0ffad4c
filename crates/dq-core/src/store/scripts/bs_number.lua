-- bs_number.lua: the beanstalkd number of a job whose id was not made from one (a job pushed over the
-- HTTP API, first shown over the beanstalkd protocol): taken from the partition's sequence, kept in the
-- record (n) and in the partition's number index, so `peek <number>` finds the job. Numbers are
-- (k - 1) * partitions + partition + 1 for the k-th of the partition's sequence: unique per installation,
-- and a number names its partition. A job that has one already keeps it.
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the partition's beanstalkd sequence (<prefix>:bs:seq)
-- KEYS[3]: the partition's number index (<prefix>:bs:ids): number -> id
-- ARGV[1]: id   ARGV[2]: partitions   ARGV[3]: this partition
-- Returns: the number, or 0 when there is no such job (or it is done).

local job, seq, index = KEYS[1], KEYS[2], KEYS[3]
local r = rec_load(job)
if not r or r.s == 'done' then return 0 end
if r.n then return r.n end
local k = redis.call('INCR', seq)
local n = (k - 1) * tonumber(ARGV[2]) + tonumber(ARGV[3]) + 1
redis.call('HSET', index, n, ARGV[1])
r.n = n
rec_store(job, r)
return n
