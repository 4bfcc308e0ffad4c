-- reserve.lua: hand out up to `count` ready jobs, taking the topics in priority order, each under a
-- fresh receipt and a deadline of now + its TTR.
--
-- KEYS[1]: the reserved set (<prefix>:reserved)
-- KEYS[2]: counts hash (<prefix>:counts)
-- KEYS[3]: the earliest deadline announced to the timers (<prefix>:announced)
-- KEYS[4..]: ready queues (<prefix>:ready:<topic>), highest priority first
-- ARGV[1]: key prefix   ARGV[2]: count   ARGV[3]: receipt nonce (random, from the caller)
-- ARGV[4]: least TTR in ms ("" for none): dq-consumer's reservations must outlive its callback's timeout
-- ARGV[5]: timer wake channel, told `<reserved key> <deadline>` when a deadline is earlier than the one
-- last announced, so a timer ends the reservation on time without sweeping for it
-- Returns: a flat array, per job: id, topic, body, attempt, receipt, deadline, run_at.

local reserved, counts, announced = KEYS[1], KEYS[2], KEYS[3]
local prefix, want, nonce = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local least_ttr = tonumber(ARGV[4]) or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
local told = tonumber(redis.call('GET', announced))
local heads = {}
local taken = 0
for k = 4, #KEYS do
  if taken >= want then break end
  local ids = redis.call('ZRANGE', KEYS[k], 0, want - taken - 1)
  local recs = {}
  for j, id in ipairs(ids) do
    recs[j] = rec_load(prefix .. ':job:' .. id)
    if recs[j] then taken = taken + 1 end
  end
  heads[#heads + 1] = {KEYS[k], ids, recs}
end

local out = {}
local n = 0
local earliest
for _, head in ipairs(heads) do
  local queue, ids, recs = head[1], head[2], head[3]
  if #ids > 0 then redis.call('ZREMRANGEBYRANK', queue, 0, #ids - 1) end
  for j, id in ipairs(ids) do
    local r = recs[j]
    -- A queue entry without a record cannot be delivered; dropping it is what delete would have done.
    if r then
      n = n + 1
      r.a = r.a + 1
      r.s, r.rc, r.d = 'reserved', nonce .. '.' .. n, now + math.max(r.ttr, least_ttr)
      rec_store(prefix .. ':job:' .. id, r)
      redis.call('ZADD', reserved, r.d, id)
      if earliest == nil or r.d < earliest then earliest = r.d end
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
-- The timer holding the partition runs expiry by the announced deadline at the latest, and learns the
-- next one then (expire.lua), so only a deadline earlier than that needs announcing.
if earliest and (told == nil or earliest < told) then
  redis.call('SET', announced, earliest)
  redis.call(publish, ARGV[5], reserved .. ' ' .. earliest)
end
return out
