-- balance.lua: a timer's heartbeat over all partitions. Registers the timer as live, forgets timers whose
-- heartbeat lapsed, and gives this timer its fair share of the partitions: it keeps or takes partitions
-- up to the share and lets go of any above it. A partition is leased to its holder for as long as the
-- holder's own heartbeat is live (its entry in the timers set), so a heartbeat writes one entry, not one
-- per partition held: the leases hash changes only when a partition changes hands. Partitions of a timer
-- that died are free once its heartbeat lapses (lease_ms), and the next heartbeat of a live timer takes
-- them. With release = 1 (drain) the timer lets go of everything.
--
-- KEYS[1]: live timers ({<prefix>}:timers, a sorted set of timer id → heartbeat expiry ms)
-- KEYS[2]: partition holders ({<prefix>}:leases, a hash of partition → timer id)
-- ARGV[1]: this timer's id   ARGV[2]: lease_ms   ARGV[3]: partition count   ARGV[4]: "1" to release all
-- Returns: {now, live timer count, partition, partition, ...} the partitions this timer holds after the call.

local timers, leases = KEYS[1], KEYS[2]
local me, lease_ms, buckets = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local holder = {}
local raw = redis.call('HGETALL', leases)
for i = 1, #raw, 2 do holder[tonumber(raw[i])] = raw[i + 1] end

if ARGV[4] == '1' then
  redis.call('ZREM', timers, me)
  for b, id in pairs(holder) do
    if id == me then redis.call('HDEL', leases, b) end
  end
  return {now, redis.call('ZCARD', timers)}
end

redis.call('ZADD', timers, now + lease_ms, me)
redis.call('ZREMRANGEBYSCORE', timers, '-inf', now)
local live = redis.call('ZRANGE', timers, 0, -1)
table.sort(live)
local n, rank, alive = #live, 0, {}
for i, id in ipairs(live) do
  alive[id] = true
  if id == me then rank = i - 1 end
end
-- Partitions split evenly; the first (partitions mod n) timers in id order take one more.
local share = math.floor(buckets / n)
if rank < buckets % n then share = share + 1 end

local mine = {}
for b = 0, buckets - 1 do
  if holder[b] == me then
    if #mine < share then
      mine[#mine + 1] = b
    else
      redis.call('HDEL', leases, b)
    end
  end
end
for b = 0, buckets - 1 do
  if #mine >= share then break end
  local id = holder[b]
  if id == nil or not alive[id] then
    redis.call('HSET', leases, b, me)
    mine[#mine + 1] = b
  end
end
local out = {now, n}
for _, b in ipairs(mine) do out[#out + 1] = b end
return out
