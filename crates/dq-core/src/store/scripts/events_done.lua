-- events_done.lua: the alert for a partition's pending dead-job events went out: forget them.
--
-- KEYS[1]: pending list (<prefix>:events:pending)
-- ARGV[1]: how many were handed out (only those go; none were added since, but be exact)
-- Returns: how many were removed.

local n = math.min(tonumber(ARGV[1]), redis.call('LLEN', KEYS[1]))
if n > 0 then redis.call('LTRIM', KEYS[1], n, -1) end
return n
