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
-- ARGV[6]: "1" to take each job from the queue whose first job comes first (lowest score, then lowest
-- id), as beanstalkd's reserve takes the best job of every watched tube; "" for the queues in the order
-- given
-- Returns: a flat array, per job: id, topic, body, attempt, receipt, deadline, run_at, ttr (the
-- reservation's length in ms, so a worker can touch at half of it without comparing clocks); then 1 when the
-- queues may still hold jobs (a topic's count says so, or they do), 0 when they are empty (the caller's
-- process then knows, without another call, that nobody needs waking for them).

local reserved, counts, announced = KEYS[1], KEYS[2], KEYS[3]
local prefix, want, nonce = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local least_ttr = tonumber(ARGV[4]) or 0
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Each ready queue is popped first (ZPOPMIN: one call, where reading it with ZRANGE and then removing
-- what was read would be two), and every popped job's record is read before the first record is
-- written. A record the script cannot read (on a slot being moved, see architecture.md, "Scripts on a
-- moving slot") puts everything popped back and fails the call, so it is sent again: nothing changed.
local queues, pops, recs = {}, {}, {}
local taken = 0
-- Pops up to n jobs of queue `key` and reads their records; an error once everything popped is back.
local function take(key, n)
  local popped = redis.call('ZPOPMIN', key, n)
  if #popped == 0 then return end
  queues[#queues + 1] = key
  pops[#pops + 1] = popped
  for j = 1, #popped, 2 do
    local r, err = rec_load(prefix .. ':job:' .. popped[j], true, key, popped[j + 1])
    if err then
      for q = 1, #queues do
        local p = pops[q]
        for i = 1, #p, 2 do redis.call('ZADD', queues[q], p[i + 1], p[i]) end
      end
      return err
    end
    recs[#recs + 1] = r or false
    if r then taken = taken + 1 end
  end
end
local err
if ARGV[6] == '1' and #KEYS > 4 then
  -- One job at a time, from the queue with the best first job.
  while taken < want and not err do
    local best, bs, bid
    for k = 4, #KEYS do
      local h = redis.call('ZRANGE', KEYS[k], 0, 0, 'WITHSCORES')
      if h[1] then
        local s = tonumber(h[2])
        if best == nil or s < bs or (s == bs and h[1] < bid) then best, bs, bid = KEYS[k], s, h[1] end
      end
    end
    if best == nil then break end
    err = take(best, 1)
  end
else
  for k = 4, #KEYS do
    if taken >= want or err then break end
    err = take(KEYS[k], want - taken)
  end
end
if err then return redis.error_reply(err) end

local out = {}
local n, i = 0, 0
local earliest
-- Jobs moved from ready to reserved, per topic: the counts change once per topic, not per job.
local moved = {}
-- The reserved set's new members: one ZADD for all (each call is much of a job's cost here).
local added = {}
for q = 1, #pops do
  local popped = pops[q]
  for j = 1, #popped, 2 do
    i = i + 1
    local id, r = popped[j], recs[i]
    -- A queue entry without a record cannot be delivered; dropping it is what delete would have done.
    if r then
      n = n + 1
      r.a = r.a + 1
      local ttr = math.max(r.ttr, least_ttr)
      r.s, r.rc, r.d = 'reserved', nonce .. '.' .. n, now + ttr
      rec_store(prefix .. ':job:' .. id, r)
      added[#added + 1] = r.d
      added[#added + 1] = id
      if earliest == nil or r.d < earliest then earliest = r.d end
      moved[r.t] = (moved[r.t] or 0) + 1
      out[#out + 1] = id
      out[#out + 1] = r.t
      out[#out + 1] = r.b
      out[#out + 1] = r.a
      out[#out + 1] = r.rc
      out[#out + 1] = r.d
      out[#out + 1] = r.r
      out[#out + 1] = ttr
    end
  end
end
for k = 1, #added, 2000 do redis.call('ZADD', reserved, unpack(added, k, math.min(k + 1999, #added))) end
-- Whether a topic taken from still has ready jobs here, as its count says after this reserve.
local counted_more = false
for topic, m in pairs(moved) do
  if redis.call('HINCRBY', counts, topic .. ':ready', -m) > 0 then counted_more = true end
  redis.call('HINCRBY', counts, topic .. ':reserved', m)
end
-- The timer holding the partition runs expiry by the announced deadline at the latest, and learns the
-- next one then (expire.lua), so only a deadline earlier than that needs announcing.
local told = earliest and tonumber(redis.call('GET', announced))
if earliest and (told == nil or earliest < told) then
  redis.call('SET', announced, earliest)
  redis.call(publish, ARGV[5], reserved .. ' ' .. earliest)
end
-- Taking fewer than asked emptied every queue; taking all that was asked may have left some. A count
-- above 0 says so without a look at the queues (a count too high costs one reserve that finds the queue
-- empty later, and nothing else); otherwise the queues are looked at, so that a count too low never
-- hides ready jobs from the caller's index.
local more = 0
if taken >= want then
  if counted_more then more = 1 else more = redis.call('EXISTS', unpack(KEYS, 4)) end
end
out[#out + 1] = math.min(more, 1)
return out
