-- touch.lua: extend a reservation: the deadline becomes now + ttr (the given one, else the job's own).
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- ARGV[1]: id   ARGV[2]: receipt   ARGV[3]: ttr_ms ("" for the job's own TTR)
-- Returns: the new deadline (ms), 0 no such job, -1 stale receipt.

local job, reserved = KEYS[1], KEYS[2]
local rec = redis.call('HMGET', job, 's', 'rc', 'ttr')
if not rec[1] then return 0 end
if rec[1] ~= 'reserved' or rec[2] ~= ARGV[2] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttr = tonumber(rec[3])
if ARGV[3] ~= '' then ttr = tonumber(ARGV[3]) end
local deadline = now + ttr
redis.call('ZADD', reserved, deadline, ARGV[1])
redis.call('HSET', job, 'd', deadline)
return deadline
