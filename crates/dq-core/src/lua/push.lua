-- push.lua: store one or more new jobs, each in its delay bucket or, when already due, its ready queue.
-- Used by both push and push many: a batch is the same operation repeated, done in one round trip.
--
-- KEYS[1]: counts hash (<prefix>:counts)
-- KEYS[2 + 3*(i-1)]: job i's record      (<prefix>:job:<id>)
-- KEYS[3 + 3*(i-1)]: job i's delay bucket (<prefix>:delayed:<bucket>)
-- KEYS[4 + 3*(i-1)]: job i's ready queue  (<prefix>:ready:<topic>)
-- ARGV[1]: ready wake channel    ARGV[2]: timer wake channel
-- ARGV[3 + 7*(i-1) ...]: job i: id, topic, body, delay_ms ("" when run_at is given), run_at ("" when
--          delay_ms is given), ttr_ms, max_attempts
-- Returns: a flat array, per job: status (1 = stored, 0 = conflict: the id is live), state, run_at.
--
-- Due times come from this server's clock (TIME), never from the caller's (invariant 2).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local counts = KEYS[1]
local ready_channel, timer_channel = ARGV[1], ARGV[2]
local out = {}
local n = (#KEYS - 1) / 3
for i = 0, n - 1 do
  local job, bucket, ready = KEYS[2 + 3 * i], KEYS[3 + 3 * i], KEYS[4 + 3 * i]
  local a = 3 + 7 * i
  local id, topic, body = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  if redis.call('EXISTS', job) == 1 then
    out[#out + 1] = 0
    out[#out + 1] = ''
    out[#out + 1] = 0
  else
    local run_at
    if ARGV[a + 3] ~= '' then
      run_at = now + tonumber(ARGV[a + 3])
    else
      run_at = tonumber(ARGV[a + 4])
    end
    local state = 'delayed'
    if run_at <= now then state = 'ready' end
    redis.call('HSET', job, 't', topic, 'b', body, 'r', run_at, 'ttr', ARGV[a + 5], 'm', ARGV[a + 6],
      'a', 0, 'c', now, 's', state)
    if state == 'ready' then
      redis.call('ZADD', ready, run_at, id)
      -- Long-polling reservers wait only on an empty queue, so only the first job needs to wake them.
      if redis.call('ZCARD', ready) == 1 then redis.call('PUBLISH', ready_channel, topic) end
    else
      local head = redis.call('ZRANGE', bucket, 0, 0, 'WITHSCORES')
      redis.call('ZADD', bucket, run_at, id)
      -- A timer sleeps until the earliest due time it knows; tell it when that just moved earlier.
      if head[2] == nil or run_at < tonumber(head[2]) then
        redis.call('PUBLISH', timer_channel, bucket .. ' ' .. run_at)
      end
    end
    redis.call('HINCRBY', counts, topic .. ':' .. state, 1)
    out[#out + 1] = 1
    out[#out + 1] = state
    out[#out + 1] = run_at
  end
end
return out
