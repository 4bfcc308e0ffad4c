-- topic_set.lua: write one topic's registration, or delete it. The registry is one hash; each entry
-- carries a version (Redis's clock in µs, above the entry's last version), so a later write always
-- carries a higher version. A deletion removes the entry. (Releases before this one kept a deleted
-- entry as a tombstone, "<version> " with no JSON; dq-checker removes those with ARGV[3].)
--
-- KEYS[1]: the registry ({<prefix>}:topics, a hash of topic → "<version> <config JSON>")
-- ARGV[1]: topic   ARGV[2]: config JSON ("" to delete)
-- ARGV[3]: optional: act only if the entry is still exactly this value (a compare-and-set)
-- Returns: the version written, 0 for a deletion, -1 when ARGV[3] did not match (nothing changed).

local current = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[3] and current ~= ARGV[3] then return -1 end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
local t = redis.call('TIME')
local version = t[1] * 1000000 + t[2]
if current then
  local v = tonumber(string.match(current, '^(%d+)'))
  if v and v >= version then version = v + 1 end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', version) .. ' ' .. ARGV[2])
return version
