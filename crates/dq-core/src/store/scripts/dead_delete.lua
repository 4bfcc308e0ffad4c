-- dead_delete.lua: delete dead jobs of a topic, records and all.
--
-- KEYS[1]: the topic's dead list (<prefix>:dead:<topic>)
-- KEYS[2]: counts hash (<prefix>:counts)
-- KEYS[3]: the beanstalkd numbers' index (<prefix>:bs:ids)
-- ARGV[1]: key prefix   ARGV[2]: topic   ARGV[3]: most jobs to take when no ids are given
-- ARGV[4]: when no ids are given, take only jobs dead for at least this many ms (Redis's clock; ""
--          for any): dq-checker's retention
-- ARGV[5..]: ids (none: the oldest dead jobs, up to ARGV[3])
-- Returns: {deleted, removed from the dead list} (the same number; the shape matches requeue.lua).
-- Ids not in the dead list are skipped.

local dead, counts, index = KEYS[1], KEYS[2], KEYS[3]
local prefix, topic = ARGV[1], ARGV[2]
local ids = {}
if #ARGV >= 5 then
  for i = 5, #ARGV do ids[#ids + 1] = ARGV[i] end
elseif ARGV[4] ~= '' then
  -- The dead list's score is the time of death.
  local t = redis.call('TIME')
  local before = t[1] * 1000 + math.floor(t[2] / 1000) - tonumber(ARGV[4])
  ids = redis.call('ZRANGE', dead, '-inf', '(' .. before, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[3]))
else
  ids = redis.call('ZRANGE', dead, 0, tonumber(ARGV[3]) - 1)
end
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot"). Where the
-- partition has a beanstalkd number index, the records are read for their numbers (n), which leave it.
local numbered = {}
if redis.call('EXISTS', index) == 1 then
  for i, id in ipairs(ids) do
    local r = rec_load(prefix .. ':job:' .. id, false, dead)
    numbered[i] = r and r.n or false
  end
else
  for _, id in ipairs(ids) do redis.call('EXISTS', prefix .. ':job:' .. id) end
end
local n = 0
for i, id in ipairs(ids) do
  if redis.call('ZREM', dead, id) == 1 then
    redis.call('DEL', prefix .. ':job:' .. id)
    if numbered[i] then redis.call('HDEL', index, numbered[i]) end
    n = n + 1
  end
end
if n > 0 then redis.call('HINCRBY', counts, topic .. ':dead', -n) end
return {n, n}
