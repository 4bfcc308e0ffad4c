-- schedule_set.lua: write one schedule, or delete it. Each entry carries `since`, Redis's clock when the
-- schedule started counting occurrences: set when the schedule is created, and again on a write that
-- restarts it (ARGV[3] = "1": a new cron or zone, a resume); kept otherwise. A deletion also forgets the
-- last occurrence fired, so a schedule made again under the name starts afresh.
--
-- KEYS[1]: the schedules ({<prefix>}:schedules, a hash of name → "<since ms> <config JSON>")
-- KEYS[2]: the last occurrences fired ({<prefix>}:schedules:fired, a hash of name → occurrence ms)
-- KEYS[3]: the schedules' version ({<prefix>}:schedules:version), raised by every change, so the firing
-- timer learns of one within its 100 ms check
-- ARGV[1]: name   ARGV[2]: config JSON ("" to delete)   ARGV[3]: "1" to restart the count from now, "0" to keep it
-- Returns: {since, 1 if the schedule existed before else 0}; since is 0 for a deletion.

local current = redis.call('HGET', KEYS[1], ARGV[1])
local existed = 0
if current then existed = 1 end
if ARGV[2] == '' then
  if current then
    redis.call('HDEL', KEYS[1], ARGV[1])
    redis.call('HDEL', KEYS[2], ARGV[1])
    redis.call('INCR', KEYS[3])
  end
  return {0, existed}
end
local t = redis.call('TIME')
local since = t[1] * 1000 + math.floor(t[2] / 1000)
if current and ARGV[3] == '0' then
  local kept = tonumber(string.match(current, '^(%d+) '))
  if kept then since = kept end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', since) .. ' ' .. ARGV[2])
redis.call('INCR', KEYS[3])
return {since, existed}
