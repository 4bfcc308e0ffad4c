-- release.lua: hand a reservation back unfinished (a consumer draining): the job goes to the front of its
-- ready queue at once and the delivery does not count, since it never completed.
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- KEYS[3]: counts hash (<prefix>:counts)
-- ARGV[1]: key prefix   ARGV[2]: id   ARGV[3]: receipt   ARGV[4]: ready wake channel
-- Returns: 1 released, 0 no such job, -1 stale receipt.

local job, reserved, counts = KEYS[1], KEYS[2], KEYS[3]
local prefix, id = ARGV[1], ARGV[2]
local rec = redis.call('HMGET', job, 't', 's', 'rc', 'r')
local topic = rec[1]
if not topic then return 0 end
if rec[2] ~= 'reserved' or rec[3] ~= ARGV[3] then return -1 end
local ready = prefix .. ':ready:' .. topic
redis.call('ZREM', reserved, id)
redis.call('HDEL', job, 'rc', 'd')
redis.call('HINCRBY', job, 'a', -1)
redis.call('HSET', job, 's', 'ready')
local was_empty = redis.call('EXISTS', ready) == 0
redis.call('ZADD', ready, tonumber(rec[4]), id)
if was_empty then redis.call('PUBLISH', ARGV[4], topic) end
redis.call('HINCRBY', counts, topic .. ':reserved', -1)
redis.call('HINCRBY', counts, topic .. ':ready', 1)
return 1
