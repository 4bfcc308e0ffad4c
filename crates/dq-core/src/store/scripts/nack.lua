-- nack.lua: a reserved job failed: it waits out its backoff in its delay set (or goes straight back to
-- ready when the delay is 0), or goes to its topic's dead list when it used all its attempts or when its
-- retry would come after the end of its retries (x: its first due time plus its max age).
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- KEYS[3]: the partition's delay set (<prefix>:delayed)
-- KEYS[4]: counts hash (<prefix>:counts)
-- KEYS[5]: events list (<prefix>:events), where a job's death is recorded for dq-checker's alerts
-- ARGV[1]: key prefix   ARGV[2]: id   ARGV[3]: receipt   ARGV[4]: error text ("" for none)
-- ARGV[5]: delay_ms chosen by the caller ("" to use the backoff list)   ARGV[6]: ready wake channel (unused:
-- `ready_add`, flow.lua, names it from the key prefix)
-- ARGV[7]: timer wake channel   ARGV[8]: a pause of the job's flow key asked by the callback, ms (a 429
-- or 503 with `Retry-After`; "" or 0 for none; see flow.lua)
-- ARGV[9]: the attempt's entry for the job's history ("" for none; record.lua, rec_attempt)
-- ARGV[10..]: backoff list in ms: the i-th after the i-th failure, the last
-- repeats; the job's own list (bo), when it was pushed with one, is used instead
-- Returns: {1, state, run_at, topic} (state 'delayed', 'ready' or 'dead'), {0} no such job, {-1} stale
-- receipt.

local job, reserved, bucket, counts, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, id = ARGV[1], ARGV[2]
local r = rec_load(job)
if not r then return {0} end
if r.s ~= 'reserved' or r.rc ~= ARGV[3] then return {-1} end
local topic = r.t
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
redis.call('EXISTS', prefix .. ':ready:' .. topic, prefix .. ':dead:' .. topic)
if r.f then flow().flow_read(prefix, topic, r.f) end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local attempts, max = r.a, r.m
redis.call('ZREM', reserved, id)
if r.f then
  local pause = tonumber(ARGV[8]) or 0
  if pause > 0 then flow().flow_pause(prefix, topic, r.f, now + pause, now) end
  flow().flow_count(prefix, topic, r.f, -1, now)
end
r.rc, r.d = nil, nil
if ARGV[4] ~= '' then r.e = ARGV[4] end
-- Every branch below writes the record whole, its history with it.
if ARGV[9] ~= '' then rec_attempt(r, ARGV[9]) end
redis.call('HINCRBY', counts, topic .. ':reserved', -1)

local delay
if ARGV[5] ~= '' then
  delay = tonumber(ARGV[5])
elseif r.bo then
  delay = r.bo[math.min(attempts, #r.bo)]
else
  local nb = #ARGV - 9
  local i = attempts
  if i > nb then i = nb end
  delay = tonumber(ARGV[9 + i])
end
local too_old = r.x and now + delay > r.x
if too_old then
  r.e = (ARGV[4] ~= '' and ARGV[4] .. '; ' or '') .. 'retries ended: max age reached'
end

if (max > 0 and attempts >= max) or too_old then
  redis.call('ZADD', prefix .. ':dead:' .. topic, now, id)
  r.s = 'dead'
  rec_store(job, r)
  redis.call('HINCRBY', counts, topic .. ':dead', 1)
  redis.call('LPUSH', events, cjson.encode({kind = 'dead', topic = topic, id = id, attempts = attempts,
    error = r.e or '', at = now}))
  redis.call('LTRIM', events, 0, 9999)
  return {1, 'dead', now, topic}
end

local run_at = now + delay
if delay <= 0 then
  ready_add(prefix, r, id, rec_score(r.p, run_at), now)
  r.s, r.r = 'ready', run_at
  rec_store(job, r)
  redis.call('HINCRBY', counts, topic .. ':ready', 1)
  return {1, 'ready', run_at, topic}
end
local head = redis.call('ZRANGE', bucket, '0', '0', 'WITHSCORES')
redis.call('ZADD', bucket, run_at, id)
if head[2] == nil or run_at < tonumber(head[2]) then
  redis.call(publish, ARGV[7], bucket .. ' ' .. run_at)
end
r.s, r.r = 'delayed', run_at
rec_store(job, r)
redis.call('HINCRBY', counts, topic .. ':delayed', 1)
return {1, 'delayed', run_at, topic}
