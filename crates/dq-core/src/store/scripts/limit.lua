-- limit.lua: a topic's delivery limits, shared by every dq-consumer: its delivery slots
-- (`callback.concurrency`), its token bucket (`callback.rate_per_s`, `callback.burst`) and a pause the
-- callback asked for (429 or 503 with Retry-After). Each worker holds slots on a lease it renews; a
-- worker that dies lets its slots go when the lease ends.
--
-- KEYS[1]: the topic's limits (<prefix>:{topic:<topic>}:limit), a hash:
--            `h:<holder>` -> "<slots> <lease end ms>", one per worker holding slots
--            `tokens`, `ts` -> the bucket's tokens (a fraction allowed) and when they were counted (ms)
--            `until`        -> no delivery starts before this time (ms)
-- ARGV[1]: the holder (a dq-consumer worker's id)
-- ARGV[2]: slots the holder has in use (deliveries running): never taken from it
-- ARGV[3]: slots the holder wants to hold (at least ARGV[2]; fewer than it holds gives some back)
-- ARGV[4]: deliveries the holder wants to start now (negative: tokens it took and did not use, given back)
-- ARGV[5]: callback.concurrency   ARGV[6]: the slots' lease, ms
-- ARGV[7]: callback.rate_per_s (0: no rate limit)   ARGV[8]: callback.burst
-- ARGV[9]: a pause asked by the callback, ms (0: none)
-- Returns: {slots held, deliveries it may start now, ms to wait before asking again (0: no need),
--          1 when the topic is paused by its callback else 0}.

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local me = 'h:' .. ARGV[1]
local in_use, want_slots, want = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local limit, lease = tonumber(ARGV[5]), tonumber(ARGV[6])
local rate, burst, pause = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

local others, tokens, ts, till = 0, nil, nil, 0
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local f, v = fields[i], fields[i + 1]
  if string.sub(f, 1, 2) == 'h:' then
    if f ~= me then
      local sp = string.find(v, ' ', 1, true)
      if tonumber(string.sub(v, sp + 1)) <= now then
        redis.call('HDEL', KEYS[1], f)
      else
        others = others + tonumber(string.sub(v, 1, sp - 1))
      end
    end
  elseif f == 'tokens' then
    tokens = tonumber(v)
  elseif f == 'ts' then
    ts = tonumber(v)
  elseif f == 'until' then
    till = tonumber(v)
  end
end

if pause > 0 and now + pause > till then
  till = now + pause
  redis.call('HSET', KEYS[1], 'until', till)
end

-- Slots: what the others leave, never fewer than the holder has in use (a lowered concurrency takes
-- effect as deliveries end).
local held = math.max(in_use, math.min(want_slots, math.max(0, limit - others)))
if held > 0 then
  redis.call('HSET', KEYS[1], me, held .. ' ' .. (now + lease))
else
  redis.call('HDEL', KEYS[1], me)
end

local start, wait = 0, 0
local free = held - in_use
if rate > 0 then
  if tokens == nil then tokens, ts = burst, now end
  tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
  if want < 0 then
    tokens = math.min(burst, tokens - want)
  elseif till <= now then
    start = math.max(0, math.min(want, math.floor(tokens), free))
    tokens = tokens - start
    if start < want and start < free then
      wait = math.ceil((1 - (tokens - math.floor(tokens))) * 1000 / rate)
    end
  end
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
elseif till <= now then
  start = math.max(0, math.min(want, free))
end
if till > now then wait = till - now end

-- Forgotten when no one asks for a minute: a bucket left alone that long is full again anyway.
redis.call('PEXPIRE', KEYS[1], math.max(60000, lease * 2, till - now + 1000))
return {held, start, wait, till > now and 1 or 0}
