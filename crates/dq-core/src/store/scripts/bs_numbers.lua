-- bs_numbers.lua: a block of numbers for the jobs one dq-server puts over the beanstalkd protocol into
-- this partition, taken from the partition's sequence: `size` values of k, the first of them no lower than
-- a least k. The server asks for a least k so that the numbers it hands out rise in the order of its puts
-- across every tube, whatever their partitions, as beanstalkd's one counter does (its reserve takes, among
-- the watched tubes' jobs of one priority, the lowest number); the values of k skipped over are never used.
--
-- KEYS[1]: the partition's beanstalkd sequence (<prefix>:bs:seq)
-- ARGV[1]: size (how many)   ARGV[2]: the least k of the block (1 for any)
-- ARGV[3]: least k - 1 + size (the block's last k when the sequence is behind the least k; computed by the
-- caller, so that no large number goes through Lua's number formatting)
-- Returns: the k of the block's last number (the block is last - size + 1 ..= last).

local seq = KEYS[1]
local k = tonumber(redis.call('GET', seq)) or 0
if k >= tonumber(ARGV[2]) - 1 then return redis.call('INCRBY', seq, ARGV[1]) end
redis.call('SET', seq, ARGV[3])
return redis.call('INCRBY', seq, 0)
