-- reschedule.lua: give a delayed or ready job a new due time, a new priority, or both.
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the partition's delay set (<prefix>:delayed)
-- KEYS[3]: counts hash (<prefix>:counts)
-- ARGV[1]: key prefix   ARGV[2]: id   ARGV[3]: delay_ms ("" when run_at is given)   ARGV[4]: run_at ("" when delay_ms is given)
--   (both "": the due time stays)
-- ARGV[5]: ready wake channel (unused: `ready_add`, flow.lua, names it from the key prefix)   ARGV[6]: timer wake channel   ARGV[7]: the new priority ("": it stays)
-- Returns: {1, state, run_at} when moved; {0, 'not_found'} or {0, <state>} when the job is not delayed or ready.

local job, bucket, counts = KEYS[1], KEYS[2], KEYS[3]
local prefix, id = ARGV[1], ARGV[2]
local r = rec_load(job)
if not r then return {0, 'not_found'} end
local topic, state = r.t, r.s
if state ~= 'delayed' and state ~= 'ready' then return {0, state} end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local run_at = r.r
if ARGV[3] ~= '' then run_at = now + tonumber(ARGV[3]) elseif ARGV[4] ~= '' then run_at = tonumber(ARGV[4]) end
if ARGV[7] ~= '' then r.p = tonumber(ARGV[7]) end

local ready = prefix .. ':ready:' .. topic
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
redis.call('EXISTS', ready)
if r.f then flow().flow_read(prefix, topic, r.f) end
if state == 'delayed' then redis.call('ZREM', bucket, id)
elseif r.f then flow().flow_remove(prefix, topic, r.f, id)
else redis.call('ZREM', ready, id) end
local new_state = 'delayed'
if run_at <= now then new_state = 'ready' end
if new_state == 'ready' then
  ready_add(prefix, r, id, rec_score(r.p, run_at), now)
else
  local head = redis.call('ZRANGE', bucket, '0', '0', 'WITHSCORES')
  redis.call('ZADD', bucket, run_at, id)
  if head[2] == nil or run_at < tonumber(head[2]) then
    redis.call(publish, ARGV[6], bucket .. ' ' .. run_at)
  end
end
r.r, r.s = run_at, new_state
rec_store(job, r)
if new_state ~= state then
  redis.call('HINCRBY', counts, topic .. ':' .. state, -1)
  redis.call('HINCRBY', counts, topic .. ':' .. new_state, 1)
end
return {1, new_state, run_at}
