-- repair_record.lua: the audit found a job record whose id is in no structure (invariant 1 broken, e.g. by
-- hand or by a bug): put the job back in its ready queue so it is delivered, rather than lost. Checked
-- again here, atomically, so a job that moved since the audit looked is left alone.
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the partition's delay set (<prefix>:delayed)
-- KEYS[3]: the reserved set (<prefix>:reserved)
-- KEYS[4]: counts hash (<prefix>:counts)
-- ARGV[1]: key prefix   ARGV[2]: id   ARGV[3]: ready wake channel
-- Returns: 1 repaired, 0 nothing to repair.

local job, bucket, reserved, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, id = ARGV[1], ARGV[2]
local r = rec_load(job)
if not r or r.s == 'done' then return 0 end
local topic, state = r.t, r.s
local ready = prefix .. ':ready:' .. topic
local where = {delayed = bucket, ready = ready, reserved = reserved, dead = prefix .. ':dead:' .. topic}
-- A ready job with a flow key is in its key's queue, or straight in the ready queue (flow.lua).
if r.f then flow().flow_read(prefix, topic, r.f) end
if where[state] and redis.call('ZSCORE', where[state], id) then return 0 end
if state == 'ready' and r.f and redis.call('ZSCORE', prefix .. ':fq:' .. topic .. ':' .. r.f, id) then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local was_empty = redis.call('EXISTS', ready) == 0
-- A job reserved when it was lost counted against its flow key: no longer.
if r.f and state == 'reserved' then flow().flow_count(prefix, topic, r.f, -1, now) end
if r.f then flow().flow_add(prefix, topic, r.f, id, rec_score(r.p, now), now)
else redis.call('ZADD', ready, rec_score(r.p, now), id) end
r.rc, r.d = nil, nil
r.s, r.e = 'ready', 'restored by the consistency audit'
rec_store(job, r)
if where[state] then redis.call('HINCRBY', counts, topic .. ':' .. state, -1) end
redis.call('HINCRBY', counts, topic .. ':ready', 1)
if was_empty and not r.f then redis.call(publish, ARGV[3], topic) end
return 1
