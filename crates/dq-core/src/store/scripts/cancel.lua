-- cancel.lua: remove a job from whatever structure holds it, and its record.
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the partition's delay set (<prefix>:delayed)
-- KEYS[3]: the reserved set (<prefix>:reserved)
-- KEYS[4]: counts hash (<prefix>:counts)
-- KEYS[5]: the beanstalkd numbers' index (<prefix>:bs:ids)
-- ARGV[1]: key prefix (ready and dead keys are named by the job's topic, known only from its record)
-- ARGV[2]: id
-- Returns: 1 when deleted, 0 when there was no such job.

local job, bucket, reserved, counts, bs_ids = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, id = ARGV[1], ARGV[2]
local r = rec_load(job)
if not r then return 0 end
local topic, state = r.t, r.s
local now
if r.f then
  -- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
  flow().flow_read(prefix, topic, r.f)
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end
if state == 'delayed' then
  redis.call('ZREM', bucket, id)
elseif state == 'ready' and r.f then
  flow().flow_remove(prefix, topic, r.f, id)
elseif state == 'ready' then
  redis.call('ZREM', prefix .. ':ready:' .. topic, id)
elseif state == 'reserved' then
  redis.call('ZREM', reserved, id)
  if r.f then flow().flow_count(prefix, topic, r.f, -1, now) end
elseif state == 'dead' then
  redis.call('ZREM', prefix .. ':dead:' .. topic, id)
end
redis.call('DEL', job)
-- A job numbered by the beanstalkd protocol leaves its number's entry (bs_number.lua).
if r.n then redis.call('HDEL', bs_ids, r.n) end
if state ~= 'done' then redis.call('HINCRBY', counts, topic .. ':' .. state, -1) end
return 1
