-- events_take.lua: hand out a partition's oldest dead-job events for alerting, without losing them if the
-- reader dies before it sent them: they move to a pending list, which only events_done.lua clears. A
-- pending list left by a reader that died is handed out again first.
--
-- KEYS[1]: events list (<prefix>:events), newest first
-- KEYS[2]: pending list (<prefix>:events:pending), oldest first
-- ARGV[1]: most events to move
-- Returns: the pending events, oldest first.

local pending = redis.call('LRANGE', KEYS[2], 0, -1)
if #pending > 0 then return pending end
local taken = redis.call('RPOP', KEYS[1], tonumber(ARGV[1]))
if not taken then return {} end
redis.call('RPUSH', KEYS[2], unpack(taken))
return taken
