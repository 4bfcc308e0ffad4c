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
local out = {0, -1, now}
local ids = {}
local per_topic = {}
local was_empty = {}
for j = 1, #due, 2 do
  local id, run_at = due[j], tonumber(due[j + 1])
  ids[#ids + 1] = id
  local job = prefix .. ':job:' .. id
  local r = rec_load(job)
  -- An id without a record was deleted half-way by hand; there is nothing to deliver.
  if r then
    local topic = r.t
    local ready = prefix .. ':ready:' .. topic
    if per_topic[topic] == nil then
      per_topic[topic] = 0
      was_empty[topic] = redis.call('EXISTS', ready) == 0
    end
    redis.call('ZADD', ready, run_at, id)
    r.s = 'ready'
    rec_store(job, r, true)
    per_topic[topic] = per_topic[topic] + 1
    out[#out + 1] = now - run_at
  end
end
if #ids > 0 then redis.call('ZREM', bucket, unpack(ids)) end
for topic, n in pairs(per_topic) do
  redis.call('HINCRBY', counts, topic .. ':delayed', -n)
  redis.call('HINCRBY', counts, topic .. ':ready', n)
  if was_empty[topic] then redis.call('PUBLISH', ready_channel, topic) end
end
out[1] = #out - 3
local head = redis.call('ZRANGE', bucket, 0, 0, 'WITHSCORES')
if head[2] then out[2] = tonumber(head[2]) end
return out
