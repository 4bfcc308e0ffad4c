-- bs_kick.lua: beanstalkd's kick of one job: a buried job (in its topic's dead list) or a delayed one
-- goes to its ready queue now, its attempts kept, and its beanstalkd counters count the kick (k: kicks).
-- The delay it was put or released with is kept as k[5] (seconds) before its due time becomes now.
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the partition's delay set (<prefix>:delayed)
-- KEYS[3]: counts hash (<prefix>:counts)
-- ARGV[1]: key prefix   ARGV[2]: id   ARGV[3]: ready wake channel (unused: `ready_add`, flow.lua,
-- names it from the key prefix, as `<prefix>:wake:ready`)
-- Returns: the job's topic when kicked, false (nil) when there is no such job or it is neither buried
-- nor delayed.

local job, bucket, counts = KEYS[1], KEYS[2], KEYS[3]
local prefix, id = ARGV[1], ARGV[2]
local r = rec_load(job)
if not r or (r.s ~= 'dead' and r.s ~= 'delayed') then return false end
local topic, from = r.t, r.s
local ready, dead = prefix .. ':ready:' .. topic, prefix .. ':dead:' .. topic
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
redis.call('EXISTS', ready)
redis.call('EXISTS', dead)
if r.f then flow().flow_read(prefix, topic, r.f) end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if from == 'dead' then redis.call('ZREM', dead, id) else redis.call('ZREM', bucket, id) end
r.k = r.k or {0, 0, 0, 0}
r.k[4] = r.k[4] + 1
if r.k[5] == nil then r.k[5] = math.max(0, math.floor((r.r - r.c) / 1000)) end
r.s, r.r = 'ready', now
if r.g then r.x = now + r.g end
rec_store(job, r)
ready_add(prefix, r, id, rec_score(r.p, now), now)
redis.call('HINCRBY', counts, topic .. ':' .. from, -1)
redis.call('HINCRBY', counts, topic .. ':ready', 1)
return topic
