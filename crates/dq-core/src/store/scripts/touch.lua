-- touch.lua: extend a reservation: the deadline becomes now + ttr (the given one, else the job's own).
--
-- KEYS[1]: job record (<prefix>:job:<id>)
-- KEYS[2]: the reserved set (<prefix>:reserved)
-- KEYS[3]: the earliest deadline announced to the timers (<prefix>:announced)
-- ARGV[1]: id   ARGV[2]: receipt   ARGV[3]: ttr_ms ("" for the job's own TTR)
-- ARGV[4]: timer wake channel, told `<reserved key> <deadline>` when the new deadline is earlier than the
-- one last announced
-- Returns: the new deadline (ms), 0 no such job, -1 stale receipt.

local job, reserved, announced = KEYS[1], KEYS[2], KEYS[3]
local r = rec_load(job)
if not r then return 0 end
if r.s ~= 'reserved' or r.rc ~= ARGV[2] then return -1 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttr = r.ttr
if ARGV[3] ~= '' then ttr = tonumber(ARGV[3]) end
r.d = now + ttr
local told = tonumber(redis.call('GET', announced))
redis.call('ZADD', reserved, r.d, ARGV[1])
rec_store(job, r)
-- See reserve.lua: only a deadline earlier than the one announced needs announcing.
if told == nil or r.d < told then
  redis.call('SET', announced, r.d)
  redis.call(publish, ARGV[4], reserved .. ' ' .. r.d)
end
return r.d
