-- activity_add.lua: add one process's activity counts to the per-minute hashes the dashboard reads
-- (see activity.rs). One call per flush, whatever the number of jobs counted: the counts are gathered
-- in the process, so Redis does no work per job. One script rather than a pipeline so that a flush
-- lands whole or not at all, and a failed flush sent again never doubles half of it.
--
-- KEYS[1], KEYS[2], ...: the minute hashes ({<prefix>}:activity:<unix minute>), one slot
-- ARGV[1]: how long a minute hash is kept after its last flush, in seconds
-- ARGV[2], ...: for each key in order, the number of fields n, then n pairs of field and increment
-- Returns: the number of fields raised.

local ttl = tonumber(ARGV[1])
local at = 2
local raised = 0
for k = 1, #KEYS do
  local n = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, n do
    redis.call('HINCRBY', KEYS[k], ARGV[at], ARGV[at + 1])
    at = at + 2
    raised = raised + 1
  end
  redis.call('EXPIRE', KEYS[k], ttl)
end
return raised
