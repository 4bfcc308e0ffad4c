-- touch.lua: extend a reservation: the deadline becomes now + ttr (the given one, else the job's own).
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- ARGV[1]: id   ARGV[2]: receipt   ARGV[3]: ttr_ms ("" for the job's own TTR)
-- ARGV[4]: timer wake channel, told `<reserved key> <deadline>` when the new deadline is the earliest
-- Returns: the new deadline (ms), 0 no such job, -1 stale receipt.

local job, reserved = KEYS[1], KEYS[2]
local r = rec_load(job)
if not r then return 0 end
if r.s ~= 'reserved' or r.rc ~= ARGV[2] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttr = r.ttr
if ARGV[3] ~= '' then ttr = tonumber(ARGV[3]) end
r.d = now + ttr
local first = redis.call('ZRANGE', reserved, 0, 0, 'WITHSCORES')
redis.call('ZADD', reserved, r.d, ARGV[1])
rec_store(job, r)
if first[2] == nil or r.d < tonumber(first[2]) then
  redis.call('PUBLISH', ARGV[4], reserved .. ' ' .. r.d)
end
return r.d
