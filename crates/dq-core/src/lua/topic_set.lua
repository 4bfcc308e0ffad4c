-- topic_set.lua: write one topic's registration (or its deletion). The registry is one hash; each entry
-- carries a version (Redis's clock in µs, above the entry's last version), so readers that cache the
-- registry can tell a newer entry from an older one.
--
-- KEYS[1]: the registry ({<prefix>}:topics, a hash of topic → "<version> <config JSON>", "" JSON = deleted)
-- ARGV[1]: topic   ARGV[2]: config JSON ("" to delete)
-- Returns: the version written.

local t = redis.call('TIME')
local version = tonumber(t[1]) * 1000000 + tonumber(t[2])
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local v = tonumber(string.match(current, '^(%d+)'))
  if v and v >= version then version = v + 1 end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', version) .. ' ' .. ARGV[2])
return version
