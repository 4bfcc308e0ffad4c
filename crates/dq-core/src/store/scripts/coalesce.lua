-- coalesce.lua: one push of a `last` (debounce) or `merge` (batching) coalescing key: into the key's
-- pending job (its last job, while that is still delayed), or as a new job that becomes the pending one.
--
--   last:  the pending job's body becomes this push's, and it is due at now + window, but never past
--          its first push + max_wait. A new job is due at now + window.
--   merge: this push's body is appended to the pending job's {"items":[...]}; the job stays due at its
--          first push + window, or is ready at once when it holds max_items. A new job is {"items":[body]},
--          due at now + window. A push whose item would take the body past the size limit starts a new
--          job; the full one is delivered at its time.
--
-- A push has an id within the key (the producer's, or one dq made). The push's key (KEYS[4]) keeps the id
-- of the job it went into, for the push memory; a push that finds its key is the same push sent again
-- (an unknown outcome, retried): it answers with that job and writes nothing, so no item goes in twice.
--
-- KEYS[1]: counts hash (<prefix>:counts)   KEYS[2]: the partition's delay set (<prefix>:delayed)
-- KEYS[3]: the coalescing key (<prefix>:coalesce:<topic>:<key>), a hash: j the last job's id, f its
--          first push (Unix ms), n its pushes
-- KEYS[4]: this push (<prefix>:coalesced:<topic>:<key>:<push id>): the id of the job it went into
-- KEYS[5]: the record of the job a new push makes (<prefix>:job:<new id>)
-- KEYS[6]: the topic's ready queue (<prefix>:ready:<topic>)
-- ARGV[1]: ready wake channel   ARGV[2]: timer wake channel   ARGV[3]: mode, "last" or "merge"
-- ARGV[4]: the id of the job a new push makes   ARGV[5]: topic   ARGV[6]: the push's body
-- ARGV[7]: window_ms   ARGV[8]: max_wait_ms ("" for none)   ARGV[9]: max_items ("" for none)
-- ARGV[10]: ttr_ms   ARGV[11]: max_attempts   ARGV[12]: the push's options, as push.lua's (its
--          dedup_ms field always empty): a new job's; of a push into the pending job, only the trace
--          context counts: a `last` push puts its own (or none) in place of the job's (the job now
--          delivers this push's body), a `merge` push leaves the job's (the first push's)
--          ARGV[13]: the body size limit (bytes)   ARGV[14]: push memory (ms)
-- Returns: {status, job id, state, run_at}: status 0 a new job, 1 into the pending job, 2 this push was
--          here already (the state and due time of its job now; state "gone" when it is gone).

local counts, bucket, ckey, pkey, new_key, ready = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local mode, new_id, topic, body = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local window = tonumber(ARGV[7])
local max_wait, max_items = tonumber(ARGV[8]), tonumber(ARGV[9])
local limit, memory = tonumber(ARGV[13]), tonumber(ARGV[14])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- Records are named by id in this partition: the new job's key less its id.
local base = string.sub(new_key, 1, #new_key - #new_id)

-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
local seen = redis.call('GET', pkey)
if seen then
  local r = rec_load(base .. seen)
  if not r then return {2, seen, 'gone', 0} end
  return {2, seen, r.s, r.r}
end
local h = redis.call('HMGET', ckey, 'j', 'f', 'n')
local pending, r
if h[1] then
  r = rec_load(base .. h[1])
  if r and r.s == 'delayed' then pending = h[1] end
end
if pending and mode == 'merge' and #r.b + 1 + #body > limit then pending = nil end
local was_empty = redis.call('EXISTS', ready) == 0
-- The options (push.lua's seven fields, or a trace context, a flow key or a priority alone); a job of a flow key (the fifth):
-- ready, it goes to the key's queue (flow.lua). The trace context (the seventh) is read to the end: a
-- tracestate may hold ";".
local prefix = string.sub(bucket, 1, #bucket - 8)
local o = {}
if string.byte(ARGV[12], 1) == 65 then
  o[7] = ARGV[12]
elseif string.byte(ARGV[12], 1) == 126 then
  -- A flow key alone: `~<key>`.
  o[5] = string.sub(ARGV[12], 2)
elseif string.byte(ARGV[12], 1) == 33 then
  -- A priority alone: `!<priority>`.
  o[4] = string.sub(ARGV[12], 2)
elseif ARGV[12] ~= '' then
  o = {string.match(ARGV[12], '^([^;]*);([^;]*);([^;]*);([^;]*);([^;]*);([^;]*);(.*)$')}
end
local fk = o[5] ~= '' and o[5] or nil
local tc = o[7] ~= '' and o[7] or nil
if fk then flow().flow_read(prefix, topic, fk) end

local function remember(id, due)
  redis.call('SET', pkey, id, 'PX', memory)
  -- The key outlives its job's due time by the push memory, so a push right after the job left still
  -- finds it and starts the next.
  redis.call('PEXPIRE', ckey, math.max(due - now, 0) + memory)
end

if pending then
  local n = tonumber(h[3] or '1') + 1
  local first = tonumber(h[2] or now)
  if mode == 'last' then
    local due = now + window
    if max_wait and first + max_wait < due then due = first + max_wait end
    r.b, r.r = body, due
    -- The job delivers this push's body, so it is in this push's trace (or in none).
    r.tc = tc
    redis.call('ZADD', bucket, due, pending)
    rec_store(base .. pending, r)
    redis.call('HSET', ckey, 'n', n)
    remember(pending, due)
    return {1, pending, 'delayed', due}
  end
  -- merge: the body is {"items":[...]}: the item goes in before its last two bytes.
  r.b = string.sub(r.b, 1, #r.b - 2) .. ',' .. body .. ']}'
  redis.call('HSET', ckey, 'n', n)
  if max_items and n >= max_items then
    -- Full: ready now.
    redis.call('ZREM', bucket, pending)
    r.s, r.r = 'ready', now
    rec_store(base .. pending, r)
    ready_add(prefix, r, pending, rec_score(r.p, now), now)
    redis.call('HINCRBY', counts, topic .. ':delayed', -1)
    redis.call('HINCRBY', counts, topic .. ':ready', 1)
    remember(pending, now)
    return {1, pending, 'ready', now}
  end
  rec_store(base .. pending, r)
  remember(pending, r.r)
  return {1, pending, 'delayed', r.r}
end

-- A new job, the key's pending one from now on.
local due, state = now + window, 'delayed'
if max_wait and max_wait < window then due = now + max_wait end
local b = body
if mode == 'merge' then
  b = '{"items":[' .. body .. ']}'
  if max_items and max_items <= 1 then due, state = now, 'ready' end
end
local x, g, bo, p
if o[2] and o[2] ~= '' then
  g = tonumber(o[2])
  x = due + g
end
if o[3] and o[3] ~= '' then
  bo = {}
  for d in string.gmatch(o[3], '%d+') do bo[#bo + 1] = tonumber(d) end
end
if o[4] and o[4] ~= '' then p = tonumber(o[4]) end
-- The delay set's first due time, read before the first write: a timer is told when this job comes first.
local head = state == 'delayed' and redis.call('ZRANGE', bucket, '0', '0', 'WITHSCORES')
if not rec_store(new_key, {t = topic, b = b, r = due, ttr = tonumber(ARGV[10]), m = tonumber(ARGV[11]),
    c = now, s = state, a = 0, x = x, g = g, bo = bo, p = p, f = fk, tc = tc}, false, true) then
  return redis.error_reply('ERR coalesce: the new job id ' .. new_id .. ' is taken')
end
if state == 'ready' and fk then
  flow().flow_add(prefix, topic, fk, new_id, rec_score(p, due), now)
elseif state == 'ready' then
  redis.call('ZADD', ready, rec_score(p, due), new_id)
  if was_empty then redis.call(publish, ARGV[1], topic) end
else
  redis.call('ZADD', bucket, due, new_id)
  if head[2] == nil or due < tonumber(head[2]) then
    redis.call(publish, ARGV[2], bucket .. ' ' .. due)
  end
end
redis.call('HINCRBY', counts, topic .. ':' .. state, 1)
redis.call('DEL', ckey)
redis.call('HSET', ckey, 'j', new_id, 'f', now, 'n', 1)
remember(new_id, due)
return {0, new_id, state, due}
