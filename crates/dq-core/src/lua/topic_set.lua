-- topic_set.lua: write one topic's registration (or its deletion) on this shard, unless the shard already
-- holds a newer one. Every shard keeps the whole registry, so any one of them can answer for it; the
-- version orders writes, so a shard that missed a write cannot bring an old registration back.
--
-- KEYS[1]: the registry (<prefix>:topics, a hash of topic → "<version> <config JSON>", "" JSON = deleted)
-- ARGV[1]: topic   ARGV[2]: version (Unix µs of the write, above every version seen for the topic)
-- ARGV[3]: config JSON ("" to delete)
-- Returns: 1 written, 0 the shard holds a newer version.

local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then
  local v = tonumber(string.match(current, '^(%d+)'))
  if v and v >= tonumber(ARGV[2]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
return 1
