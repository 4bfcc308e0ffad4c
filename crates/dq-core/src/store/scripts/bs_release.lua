-- bs_release.lua: beanstalkd's release and bury of a reserved job. Release puts it back in its ready
-- queue (or in its delay set for `delay_ms`) under a new priority; bury puts it in its topic's dead list
-- with a new priority. Unlike nack, neither ends the job after its last attempt (a beanstalkd client
-- decides that), and both count in the job's beanstalkd counters (k: releases, buries; a release keeps its
-- delay in seconds as k[5], which `stats-job` shows).
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- KEYS[3]: the partition's delay set (<prefix>:delayed)
-- KEYS[4]: counts hash (<prefix>:counts)
-- ARGV[1]: key prefix   ARGV[2]: id   ARGV[3]: receipt   ARGV[4]: priority
-- ARGV[5]: delay in ms ("" to bury)   ARGV[6]: ready wake channel (unused: `ready_add`,
-- flow.lua, names it from the key prefix)   ARGV[7]: timer wake channel
-- ARGV[8]: the attempt's entry for the job's history ("" for none; record.lua, rec_attempt)
-- Returns: {1, state, topic} released or buried (state 'ready', 'delayed' or 'dead'), {0} no such job, {-1} not
-- reserved under that receipt.

local job, reserved, bucket, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, id = ARGV[1], ARGV[2]
local r = rec_load(job)
if not r then return {0} end
if r.s ~= 'reserved' or r.rc ~= ARGV[3] then return {-1} end
local topic = r.t
local ready = prefix .. ':ready:' .. topic
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
redis.call('EXISTS', ready)
redis.call('EXISTS', prefix .. ':dead:' .. topic)
if r.f then flow().flow_read(prefix, topic, r.f) end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', reserved, id)
if r.f then flow().flow_count(prefix, topic, r.f, -1, now) end
redis.call('HINCRBY', counts, topic .. ':reserved', -1)
r.rc, r.d = nil, nil
-- Every branch below writes the record whole, its history with it.
if ARGV[8] ~= '' then rec_attempt(r, ARGV[8]) end
r.p = tonumber(ARGV[4])
r.k = r.k or {0, 0, 0, 0}
if ARGV[5] == '' then
  r.k[3] = r.k[3] + 1
  r.s = 'dead'
  rec_store(job, r)
  redis.call('ZADD', prefix .. ':dead:' .. topic, now, id)
  redis.call('HINCRBY', counts, topic .. ':dead', 1)
  return {1, 'dead', topic}
end
r.k[2] = r.k[2] + 1
local delay = tonumber(ARGV[5])
r.k[5] = math.floor(delay / 1000)
if delay <= 0 then
  -- Back in its place: its due time stays, so it goes ahead of the jobs of its priority that became due
  -- after it (beanstalkd puts a released job back by its number, which is its put order).
  r.s = 'ready'
  rec_store(job, r)
  ready_add(prefix, r, id, rec_score(r.p, r.r), now)
  redis.call('HINCRBY', counts, topic .. ':ready', 1)
  return {1, 'ready', topic}
end
r.r = now + delay
local head = redis.call('ZRANGE', bucket, '0', '0', 'WITHSCORES')
redis.call('ZADD', bucket, r.r, id)
if head[2] == nil or r.r < tonumber(head[2]) then
  redis.call(publish, ARGV[7], bucket .. ' ' .. r.r)
end
r.s = 'delayed'
rec_store(job, r)
redis.call('HINCRBY', counts, topic .. ':delayed', 1)
return {1, 'delayed', topic}
