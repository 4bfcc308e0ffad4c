-- release.lua: hand a reservation back unfinished (a consumer draining): the job goes back to its ready
-- queue at once, in its place by priority and due time, and the delivery does not count, since it never
-- completed (unless the caller says it does: beanstalkd counts every reservation in `reserves`, so a
-- beanstalkd connection that closes holding a job hands it back counted).
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- KEYS[3]: counts hash (<prefix>:counts)
-- ARGV[1]: key prefix   ARGV[2]: id   ARGV[3]: receipt   ARGV[4]: ready wake channel (unused:
-- `ready_add`, flow.lua, names it from the key prefix)
-- ARGV[5]: "1" when the delivery counts, "" when it does not
-- Returns: 1 released, 0 no such job, -1 stale receipt.

local job, reserved, counts = KEYS[1], KEYS[2], KEYS[3]
local prefix, id = ARGV[1], ARGV[2]
local r = rec_load(job)
if not r then return 0 end
if r.s ~= 'reserved' or r.rc ~= ARGV[3] then return -1 end
local topic = r.t
local ready = prefix .. ':ready:' .. topic
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
redis.call('EXISTS', ready)
if r.f then flow().flow_read(prefix, topic, r.f) end
redis.call('ZREM', reserved, id)
r.rc, r.d = nil, nil
if ARGV[5] ~= '1' then r.a = r.a - 1 end
r.s = 'ready'
rec_store(job, r)
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if r.f then flow().flow_count(prefix, topic, r.f, -1, now) end
ready_add(prefix, r, id, rec_score(r.p, r.r), now)
redis.call('HINCRBY', counts, topic .. ':reserved', -1)
redis.call('HINCRBY', counts, topic .. ':ready', 1)
return 1
