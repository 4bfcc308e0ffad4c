-- promote_plain.lua: move a partition's due jobs to their ready queues, the fast way. Not a script of its
-- own: it goes in front of promote.lua (promote.rs), which calls it when no worker waits.
--
-- It takes the common call: no worker waits (nothing to hand off), and every due job is a plain one,
-- whose topic and state rec_topic reads (no flow key, no priority, no trace context the caller wants
-- spans for). Each record's state is changed in place (SETRANGE of its one byte), without the tables
-- the general way makes for hand-offs, flow keys and priorities. A job of another kind, found while
-- the records are read (before the first write), leaves the call to that general way with nothing
-- written, and the general way reads the records again.
--
-- KEYS[1]: none of its own (promote.lua's; its keys come as arguments)
-- ARGV[1]: none of its own (promote.lua's)
-- Returns: nothing (defines local function promote_plain).

-- The due jobs (`due`: id, due time, ...; `count` of them) of the partition `prefix` moved to their
-- ready queues, or nil when the call is not one this way takes. `bucket` and `counts` the partition's
-- delay set and counts hash; `now` Redis's clock, `next_due` the delay set's next due time when the
-- peek told it; `spans` and `ready_channel` as promote.lua's ARGV. Returns promote.lua's answer for the
-- partition.
local function promote_plain(bucket, counts, prefix, due, count, now, next_due, spans, ready_channel)
  -- Per job: its record's key, its topic (false: no record) and its state's offset and new byte.
  local keys, topics, offsets, bytes = {}, {}, {}, {}
  for i = 1, count do
    local member = due[2 * i - 1]
    if string.byte(member, 1) == 126 then return nil end
    local key = prefix .. ':job:' .. member
    local raw = redis.pcall('GET', key)
    local topic, traced, fk, at = false, false, nil, nil
    if raw then
      topic, traced, fk, at = rec_topic(raw)
      if not topic or fk or (traced and spans) then return nil end
    end
    keys[i], topics[i], offsets[i], bytes[i] = key, topic, at, traced and '\10' or '\2'
  end
  -- Per topic: its ready queue's new members, and whether the queue was empty (its wake-up).
  local adds, empty, order = {}, {}, {}
  for i = 1, count do
    local topic = topics[i]
    if topic and not adds[topic] then
      adds[topic] = {}
      order[#order + 1] = topic
      empty[topic] = redis.call('EXISTS', prefix .. ':ready:' .. topic) == 0
    end
  end
  local out = {0, -1, now, 0}
  if count > 0 then redis.call('ZREMRANGEBYRANK', bucket, '0', count == 1 and '0' or count - 1) end
  for i = 1, count do
    local topic = topics[i]
    if topic then
      local run_at = due[2 * i] + 0
      redis.call('SETRANGE', keys[i], offsets[i] == 1 and '1' or offsets[i], bytes[i])
      local a = adds[topic]
      a[#a + 1] = string.format('%d', rec_score(nil, run_at))
      a[#a + 1] = due[2 * i - 1]
      out[#out + 1] = now - run_at
    end
  end
  for _, topic in ipairs(order) do
    local a = adds[topic]
    for k = 1, #a, 2000 do redis.call('ZADD', prefix .. ':ready:' .. topic, unpack(a, k, math.min(k + 1999, #a))) end
    local m = #a / 2
    redis.call('HINCRBY', counts, topic .. ':delayed', m == 1 and '-1' or -m)
    redis.call('HINCRBY', counts, topic .. ':ready', m == 1 and '1' or m)
    if empty[topic] then redis.call(publish, ready_channel, topic) end
  end
  out[1] = #out - 4
  if next_due then
    out[2] = next_due
  else
    local head = redis.call('ZRANGE', bucket, '0', '0', 'WITHSCORES')
    if head[2] then out[2] = head[2] end
  end
  return out
end
