-- reserve.lua: hand out up to `count` ready jobs, taking the topics in priority order, each under a
-- fresh receipt and a deadline of now + its TTR.
--
-- KEYS[1]: the reserved set (<prefix>:reserved)
-- KEYS[2]: counts hash (<prefix>:counts)
-- KEYS[3..]: ready queues (<prefix>:ready:<topic>), highest priority first
-- ARGV[1]: key prefix   ARGV[2]: count   ARGV[3]: receipt nonce (random, from the caller)
-- ARGV[4]: least TTR in ms ("" for none): dq-consumer's reservations must outlive its callback's timeout
-- Returns: a flat array, per job: id, topic, body, attempt, receipt, deadline, run_at.

local reserved, counts = KEYS[1], KEYS[2]
local prefix, want, nonce = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local least_ttr = tonumber(ARGV[4]) or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
local taken = 0
for k = 3, #KEYS do
  if taken >= want then break end
  local popped = redis.call('ZPOPMIN', KEYS[k], want - taken)
  for j = 1, #popped, 2 do
    local id = popped[j]
    local job = prefix .. ':job:' .. id
    local r = rec_load(job)
    -- A queue entry without a record cannot be delivered; dropping it is what delete would have done.
    if r then
      taken = taken + 1
      r.a = r.a + 1
      r.s, r.rc, r.d = 'reserved', nonce .. '.' .. taken, now + math.max(r.ttr, least_ttr)
      rec_store(job, r)
      redis.call('ZADD', reserved, r.d, id)
      redis.call('HINCRBY', counts, r.t .. ':ready', -1)
      redis.call('HINCRBY', counts, r.t .. ':reserved', 1)
      out[#out + 1] = id
      out[#out + 1] = r.t
      out[#out + 1] = r.b
      out[#out + 1] = r.a
      out[#out + 1] = r.rc
      out[#out + 1] = r.d
      out[#out + 1] = r.r
    end
  end
end
return out
