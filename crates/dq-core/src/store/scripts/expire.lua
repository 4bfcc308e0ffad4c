-- expire.lua: end the reservations whose deadline passed (the consumer died or hung): each job goes back
-- to the front of its ready queue at once, or to its dead list when it used all its attempts or the end
-- of its retries (x) has passed. The
-- receipt is cleared, so the old holder's ack, nack or touch is refused (invariant 3).
--
-- KEYS[1]: the reserved set (<prefix>:reserved)
-- KEYS[2]: counts hash (<prefix>:counts)
-- KEYS[3]: events list (<prefix>:events), where a job's death is recorded for dq-checker's alerts
-- KEYS[4]: the earliest deadline announced to the timers (<prefix>:announced): the caller, the timer
--          that holds the partition, learns the next deadline from the answer, so that becomes it
-- ARGV[1]: key prefix   ARGV[2]: most jobs to handle in this call   ARGV[3]: ready wake channel (unused: `ready_add`, flow.lua,
-- names it from the key prefix)
-- ARGV[4]: "1" to add an `expired` attempt to each job's history (record.lua, rec_attempt); "" for none
-- Returns: {back to ready, dead, next_deadline (-1 when none is reserved), now}

local reserved, counts, events, announced = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, limit = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expired = redis.call('ZRANGEBYSCORE', reserved, '-inf', now, 'LIMIT', 0, limit)
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
local told = tonumber(redis.call('GET', announced))
local recs = {}
for i, id in ipairs(expired) do
  local r = rec_load(prefix .. ':job:' .. id, false, reserved)
  recs[i] = r
  if r then
    redis.call('EXISTS', prefix .. ':ready:' .. r.t, prefix .. ':dead:' .. r.t)
    if r.f then flow().flow_read(prefix, r.t, r.f) end
  end
end

local to_ready, to_dead = 0, 0
-- The expired ids are the reserved set's first ones, in rank order.
if #expired > 0 then redis.call('ZREMRANGEBYRANK', reserved, '0', #expired - 1) end
for i, id in ipairs(expired) do
  local job = prefix .. ':job:' .. id
  local r = recs[i]
  if r then
    local topic = r.t
    if ARGV[4] == '1' then
      -- The attempt began when the reservation was made, which its receipt says when made by dq-core's
      -- receipt_nonce (11 hex digits of ms first, 23 in all); else its deadline minus its TTR.
      local nonce = string.match(r.rc or '', '^(%x+)%.')
      local started = nonce and #nonce == 23 and tonumber(string.sub(nonce, 1, 11), 16) or (r.d - r.ttr)
      started = math.min(started, now)
      rec_attempt(r, cmsgpack.pack({0, started, now - started, 5, false, 'reservation expired (ttr)', false, false}))
    end
    r.rc, r.d = nil, nil
    r.e = 'reservation expired (ttr)'
    -- beanstalkd's `timeouts` of the job (stats-job), counted whichever protocol reserved it.
    r.k = r.k or {0, 0, 0, 0}
    r.k[1] = r.k[1] + 1
    redis.call('HINCRBY', counts, topic .. ':reserved', -1)
    if r.f then flow().flow_count(prefix, topic, r.f, -1, now) end
    local attempts, max = r.a, r.m
    if r.x and now > r.x then r.e = r.e .. '; retries ended: max age reached' end
    if (max > 0 and attempts >= max) or (r.x and now > r.x) then
      redis.call('ZADD', prefix .. ':dead:' .. topic, now, id)
      r.s = 'dead'
      rec_store(job, r)
      redis.call('HINCRBY', counts, topic .. ':dead', 1)
      redis.call('LPUSH', events, cjson.encode({kind = 'dead', topic = topic, id = id, attempts = attempts,
        error = r.e, at = now}))
      redis.call('LTRIM', events, 0, 9999)
      to_dead = to_dead + 1
    else
      -- Its original due time puts it ahead of jobs that became due after it.
      ready_add(prefix, r, id, rec_score(r.p, r.r), now)
      r.s = 'ready'
      rec_store(job, r)
      redis.call('HINCRBY', counts, topic .. ':ready', 1)
      to_ready = to_ready + 1
    end
  end
end
local head = redis.call('ZRANGE', reserved, '0', '0', 'WITHSCORES')
local next_deadline = -1
if head[2] then next_deadline = tonumber(head[2]) end
-- Written only when it changes: an idle partition's sweep writes nothing.
if next_deadline < 0 and told then
  redis.call('DEL', announced)
elseif next_deadline >= 0 and next_deadline ~= told then
  redis.call('SET', announced, next_deadline)
end
return {to_ready, to_dead, next_deadline, now}
