-- hooks_take.lua: hand out a partition's due hooks (dead-job or success) to the dq-checker that sends them, each
-- claimed for as long as its send can take: its next try moves that far ahead, so no other checker sends
-- it meanwhile, and one that a checker was sending when it died is tried again once the claim ends.
--
-- KEYS[1]: a hooks set (<prefix>:dead_hooks or <prefix>:success_hooks): `<failed tries> <at ms> <topic>
--          <id>` scored by the time of the next try (ms)
-- ARGV[1]: most hooks to hand out   ARGV[2]: how long a claim lasts, ms
-- Returns: {how many hooks the set holds, due hook, due hook, ...}, the due ones earliest first.

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local until_ms = now + tonumber(ARGV[2])
for _, hook in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', until_ms, hook)
end
return {redis.call('ZCARD', KEYS[1]), unpack(due)}
