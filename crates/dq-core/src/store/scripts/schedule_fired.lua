-- schedule_fired.lua: note that a schedule fired an occurrence. The mark only rises, so a timer that
-- fired late (two timers for a moment, during a takeover) never moves it back onto an occurrence already
-- fired; and it is kept only while the schedule exists, so a timer that fired just as the schedule was
-- deleted leaves nothing behind.
--
-- KEYS[1]: the schedules ({<prefix>}:schedules)   KEYS[2]: the last occurrences fired ({<prefix>}:schedules:fired)
-- ARGV[1]: name   ARGV[2]: the occurrence fired, Unix ms
-- Returns: the last occurrence fired after the call, -1 when the schedule does not exist.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
local at = tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]))
if last and last >= at then return last end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return at
