-- promote.lua: move the jobs of one delay set that are due now to their topics' ready queues.
-- Atomic, so however many timers run it on the same partition, each due job moves exactly once (invariant 4).
--
-- KEYS[1]: the partition's delay set (<prefix>:delayed)
-- KEYS[2]: counts hash (<prefix>:counts)
-- ARGV[1]: key prefix   ARGV[2]: most jobs to move in this call   ARGV[3]: ready wake channel
-- Returns: {moved, next_due (-1 when the delay set is empty), now, lateness of each moved job in ms ...}

local bucket, counts = KEYS[1], KEYS[2]
local prefix, limit, ready_channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', bucket, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
local recs = {}
local per_topic = {}
local was_empty = {}
local count = #due / 2
for i = 1, count do
  local r = rec_load(prefix .. ':job:' .. due[2 * i - 1], false, bucket, due[2 * i])
  recs[i] = r
  if r and per_topic[r.t] == nil then
    per_topic[r.t] = 0
    was_empty[r.t] = redis.call('EXISTS', prefix .. ':ready:' .. r.t) == 0
  end
end

local out = {0, -1, now}
-- The due ids are the delay set's first ones, in rank order.
if count > 0 then redis.call('ZREMRANGEBYRANK', bucket, 0, count - 1) end
for i = 1, count do
  local id, run_at, r = due[2 * i - 1], tonumber(due[2 * i]), recs[i]
  -- An id without a record was deleted half-way by hand; there is nothing to deliver.
  if r then
    redis.call('ZADD', prefix .. ':ready:' .. r.t, r.p or run_at, id)
    r.s = 'ready'
    rec_store(prefix .. ':job:' .. id, r, true)
    per_topic[r.t] = per_topic[r.t] + 1
    out[#out + 1] = now - run_at
  end
end
for topic, n in pairs(per_topic) do
  redis.call('HINCRBY', counts, topic .. ':delayed', -n)
  redis.call('HINCRBY', counts, topic .. ':ready', n)
  if was_empty[topic] then redis.call(publish, ready_channel, topic) end
end
out[1] = #out - 3
local head = redis.call('ZRANGE', bucket, 0, 0, 'WITHSCORES')
if head[2] then out[2] = tonumber(head[2]) end
return out
