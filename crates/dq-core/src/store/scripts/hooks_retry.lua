-- hooks_retry.lua: a try of a hook (dead-job or success) failed: the hook waits for its next try, with one
-- more failed try counted in it.
--
-- KEYS[1]: the hooks set (<prefix>:dead_hooks or <prefix>:success_hooks)
-- ARGV[1]: the hook as it was handed out   ARGV[2]: the hook with the failed try counted
-- ARGV[3]: wait before the next try, ms
-- Returns: 1, or 0 when the hook is no longer there (sent or given up meanwhile): nothing changes then.

if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
return 1
