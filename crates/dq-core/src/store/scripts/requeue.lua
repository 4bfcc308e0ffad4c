-- requeue.lua: give dead jobs of a topic a fresh start: back to the ready queue with their attempts
-- reset, and their retry age (g) counted again from now, as operators do once the cause is fixed.
--
-- KEYS[1]: the topic's dead list (<prefix>:dead:<topic>)
-- KEYS[2]: the topic's ready queue (<prefix>:ready:<topic>)
-- KEYS[3]: counts hash (<prefix>:counts)
-- ARGV[1]: key prefix   ARGV[2]: topic   ARGV[3]: ready wake channel   ARGV[4]: most jobs to take when no
-- ids are given   ARGV[5..]: ids (none: the oldest dead jobs, up to ARGV[4])
-- Returns: {requeued, removed from the dead list}; they differ by dead ids that had lost their record
-- (dropped from the list). Ids not in the dead list are skipped.

local dead, ready, counts = KEYS[1], KEYS[2], KEYS[3]
local prefix, topic = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ids = {}
if #ARGV >= 5 then
  for i = 5, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = redis.call('ZRANGE', dead, 0, tonumber(ARGV[4]) - 1)
end
local was_empty = redis.call('EXISTS', ready) == 0
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
local recs, listed = {}, {}
for i, id in ipairs(ids) do
  local score = redis.call('ZSCORE', dead, id)
  listed[i] = score ~= false
  if listed[i] then recs[i] = rec_load(prefix .. ':job:' .. id, false, dead, score) end
  if recs[i] and recs[i].f then flow().flow_read(prefix, topic, recs[i].f) end
end

local n, removed = 0, 0
for i, id in ipairs(ids) do
  -- (The ZREM answer guards against an id given twice.)
  if listed[i] and redis.call('ZREM', dead, id) == 1 then
    removed = removed + 1
    local job = prefix .. ':job:' .. id
    local r = recs[i]
    if r then
      r.s, r.a, r.r = 'ready', 0, now
      if r.g then r.x = now + r.g end
      rec_store(job, r)
      if r.f then
        flow().flow_add(prefix, topic, r.f, id, rec_score(r.p, now), now)
      else
        redis.call('ZADD', ready, rec_score(r.p, now), id)
      end
      n = n + 1
    end
  end
end
if removed > 0 then redis.call('HINCRBY', counts, topic .. ':dead', -removed) end
if n > 0 then
  redis.call('HINCRBY', counts, topic .. ':ready', n)
  if was_empty then redis.call(publish, ARGV[3], topic) end
end
return {n, removed}
