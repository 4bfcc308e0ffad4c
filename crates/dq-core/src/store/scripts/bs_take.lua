-- bs_take.lua: beanstalkd's reserve-job: reserve one given job that is ready, delayed or buried (in its
-- topic's dead list), under a fresh receipt and a deadline of now + its TTR, as reserve.lua does for the
-- first job of a queue.
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- KEYS[3]: the partition's delay set (<prefix>:delayed)
-- KEYS[4]: counts hash (<prefix>:counts)
-- KEYS[5]: the earliest deadline announced to the timers (<prefix>:announced)
-- ARGV[1]: key prefix   ARGV[2]: id   ARGV[3]: receipt   ARGV[4]: timer wake channel
-- Returns: {topic, body, attempt, receipt, deadline}, or false (nil) when the job is not ready, delayed
-- or buried (or there is none).

local job, reserved, bucket, counts, announced = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, id = ARGV[1], ARGV[2]
local r = rec_load(job)
if not r or (r.s ~= 'ready' and r.s ~= 'delayed' and r.s ~= 'dead') then return false end
local topic, from = r.t, r.s
local ready, dead = prefix .. ':ready:' .. topic, prefix .. ':dead:' .. topic
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
redis.call('EXISTS', ready, dead)
if r.f then flow().flow_read(prefix, topic, r.f) end
local told = tonumber(redis.call('GET', announced))
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- A job with a flow key is taken out of its key's queue, and its reservation counts against the key.
if from == 'ready' and r.f then flow().flow_remove(prefix, topic, r.f, id)
elseif from == 'ready' then redis.call('ZREM', ready, id)
elseif from == 'dead' then redis.call('ZREM', dead, id)
else redis.call('ZREM', bucket, id) end
if r.f then flow().flow_count(prefix, topic, r.f, 1, now) end
r.a = r.a + 1
r.s, r.rc, r.d = 'reserved', ARGV[3], now + r.ttr
rec_store(job, r)
redis.call('ZADD', reserved, r.d, id)
redis.call('HINCRBY', counts, topic .. ':' .. from, -1)
redis.call('HINCRBY', counts, topic .. ':reserved', 1)
if told == nil or r.d < told then
  redis.call('SET', announced, r.d)
  redis.call(publish, ARGV[4], reserved .. ' ' .. r.d)
end
return {topic, r.b, r.a, r.rc, r.d, r.ttr}
