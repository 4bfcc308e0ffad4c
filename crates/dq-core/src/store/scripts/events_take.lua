-- events_take.lua: hand out a partition's oldest dead-job events for alerting, without losing them if the
-- reader dies before it sent them: new events move to a pending list, which only events_done.lua clears,
-- and the pending list's head is handed out (so what a reader that died left goes first). Moving an
-- event is when the death's hook is queued, once, if its topic has a callback.on_dead_url: hooks never
-- wait for an alert channel that refuses, as long as the pending list has room.
--
-- KEYS[1]: events list (<prefix>:events), newest first
-- KEYS[2]: pending list (<prefix>:events:pending), oldest first
-- KEYS[3]: dead hooks (<prefix>:dead_hooks): `<failed tries> <died at ms> <topic> <id>` scored by the
--          time of the next try (ms)
-- ARGV[1]: most events to hand out, and to move in one call
-- ARGV[2..]: the topics that have a callback.on_dead_url
-- Returns: the first ARGV[1] pending events, oldest first.

local max = tonumber(ARGV[1])
-- While alerts cannot go out, the pending list stays within the events list's own cap (10,000).
local room = 10000 - redis.call('LLEN', KEYS[2])
if room > 0 then
  local taken = redis.call('RPOP', KEYS[1], math.min(room, max))
  if taken then
    redis.call('RPUSH', KEYS[2], unpack(taken))
    if #ARGV > 1 then
      local hooked = {}
      for i = 2, #ARGV do hooked[ARGV[i]] = true end
      local t = redis.call('TIME')
      local now = t[1] * 1000 + math.floor(t[2] / 1000)
      for _, e in ipairs(taken) do
        local ok, ev = pcall(cjson.decode, e)
        if ok and type(ev) == 'table' and type(ev.id) == 'string' and type(ev.topic) == 'string'
            and hooked[ev.topic] then
          -- cjson reads numbers as doubles: %.0f writes the ms whole, not as 1.7e+12.
          local died = string.format('%.0f', tonumber(ev.at) or now)
          redis.call('ZADD', KEYS[3], 'NX', now, '0 ' .. died .. ' ' .. ev.topic .. ' ' .. ev.id)
        end
      end
    end
  end
end
return redis.call('LRANGE', KEYS[2], 0, max - 1)
