-- balance.lua: a timer's heartbeat over all partitions. Registers the timer as live, forgets timers whose
-- heartbeat lapsed, and gives this timer its fair share of the partitions: it keeps or takes leases
-- up to the share and lets go of any above it. Leases of a timer that died lapse after lease_ms, and the
-- next heartbeat of a live timer takes them. With release = 1 (drain) the timer lets go of everything.
--
-- KEYS[1]: live timers ({<prefix>}:timers, a sorted set of timer id → heartbeat expiry ms)
-- KEYS[2]: partition leases ({<prefix>}:leases, a hash of partition → "<timer id> <expiry ms>")
-- ARGV[1]: this timer's id   ARGV[2]: lease_ms   ARGV[3]: partition count   ARGV[4]: "1" to release all
-- Returns: {now, live timer count, partition, partition, ...} the partitions this timer holds after the call.

local timers, leases = KEYS[1], KEYS[2]
local me, lease_ms, buckets = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local held = {}
local raw = redis.call('HGETALL', leases)
for i = 1, #raw, 2 do
  local owner, expiry = string.match(raw[i + 1], '^(%S+) (%d+)$')
  held[tonumber(raw[i])] = {owner, tonumber(expiry)}
end

if ARGV[4] == '1' then
  redis.call('ZREM', timers, me)
  for b, l in pairs(held) do
    if l[1] == me then redis.call('HDEL', leases, b) end
  end
  return {now, redis.call('ZCARD', timers)}
end

redis.call('ZADD', timers, now + lease_ms, me)
redis.call('ZREMRANGEBYSCORE', timers, '-inf', now)
local live = redis.call('ZRANGE', timers, 0, -1)
table.sort(live)
local n, rank = #live, 0
for i, id in ipairs(live) do
  if id == me then rank = i - 1 end
end
-- Partitions split evenly; the first (partitions mod n) timers in id order take one more.
local share = math.floor(buckets / n)
if rank < buckets % n then share = share + 1 end

local mine = {}
local lease = me .. ' ' .. (now + lease_ms)
for b = 0, buckets - 1 do
  local l = held[b]
  if l and l[1] == me and l[2] > now then
    if #mine < share then
      redis.call('HSET', leases, b, lease)
      mine[#mine + 1] = b
    else
      redis.call('HDEL', leases, b)
    end
  end
end
for b = 0, buckets - 1 do
  if #mine >= share then break end
  local l = held[b]
  if l == nil or l[2] <= now then
    redis.call('HSET', leases, b, lease)
    mine[#mine + 1] = b
  end
end
local out = {now, n}
for _, b in ipairs(mine) do out[#out + 1] = b end
return out
