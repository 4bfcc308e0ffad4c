-- counts_prune.lua: remove fields of a partition's counts hash that are 0, so topics that no longer
-- have jobs leave nothing behind. The scripts that move jobs only add and subtract (a field that
-- reaches 0 stays, and the next job of the topic finds it): removing it there would add an HDEL, and
-- a re-creation, to the path of every job whenever a queue empties, so dq-checker does it from time
-- to time instead. Readers treat 0 as absent.
--
-- KEYS[1]: the counts hash (<prefix>:counts)
-- ARGV[1], ARGV[2], ...: fields seen at 0; each is removed only if it is still 0
-- Returns: how many were removed.

local n = 0
for i = 1, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == '0' then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return n
