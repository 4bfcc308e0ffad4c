-- handoff.lua: hand due jobs, reserved, to waiting dq-consumer workers, the fast way. Not a script of its
-- own: it goes in front of promote.lua (scripts.rs), which calls it when workers wait.
--
-- It takes a call whose every due job is a plain one (no flow key, no priority, no trace context the
-- caller wants spans for) of a topic whose waiting workers have a free slot for it, so that every job is
-- handed. Each record is read by position (rec_fields, as reserve.lua does) and written back with four
-- fields changed: the state (reserved), the attempt, the deadline and the receipt. Without the tables
-- promote.lua's general way makes for hand-offs, flow keys and priorities, a one-job hand-off costs
-- about a fifth fewer instructions (docs/operations.md, Capacity). Any other call it leaves to that
-- general way, having written nothing (a record in an older format may have been written again in
-- this one, which says the same: rec_fields), and the general way reads the records again.
--
-- KEYS[1]: none of its own (promote.lua's; its keys come as arguments)
-- ARGV[1]: none of its own (promote.lua's: the waiting workers, ARGV[wbase + 1..], are read here)
-- Returns: nothing (defines local function handoff_plain).

-- The due jobs (`due`: id, due time, ...; `count` of them) of the partition `prefix` handed to the
-- waiting workers, or nil when the call is not one this way takes. `bucket`, `counts`, `reserved` and
-- `announced` the partition's keys; `now` Redis's clock, `next_due` the delay set's next due time when
-- the peek told it; `nonce`, `spans`, `ready_channel` and `timer_channel` as promote.lua's ARGV; the
-- `nw` waiting workers at ARGV[wbase + 1..] with `left` slots each; receipts numbered from `rcb` + 1.
-- Returns promote.lua's answer.
local function handoff_plain(bucket, counts, reserved, announced, prefix, due, count, now, next_due, nonce, spans,
    ready_channel, timer_channel, wbase, nw, left, rcb)
  -- The waiting workers, in the order given; those with free slots by topic.
  local workers, free = {}, {}
  for w = 1, nw do
    local a = wbase + (w - 1) * 4
    local wk = {channel = ARGV[a + 2], slots = left[w], ttr = ARGV[a + 4] + 0, jobs = {}}
    workers[w] = wk
    if wk.slots > 0 then
      local l = free[ARGV[a + 1]]
      if not l then
        l = {}
        free[ARGV[a + 1]] = l
      end
      l[#l + 1] = wk
    end
  end
  -- Per due job: {id, its array, its trace context, its history, its worker, its entry in the worker's
  -- message (attempt, receipt and deadline at 4, 5 and 6)}.
  local picks = {}
  for i = 1, count do
    local id = due[2 * i - 1]
    if string.byte(id, 1) == 126 then break end
    local v, fk, tc, h = rec_fields(prefix .. ':job:' .. id)
    if not v or fk or v[15] or (tc and spans) then break end
    local wk
    for _, k in ipairs(free[v[2]] or {}) do
      if #k.jobs < k.slots then
        wk = k
        break
      end
    end
    if not wk then break end
    local ttr = math.max(v[5], wk.ttr)
    local a, rc, d = (v[8] or 0) + 1, nonce .. '.' .. (rcb + i), now + ttr
    local entry = {id, v[2], v[3], a, rc, d, v[4], ttr}
    if tc then entry[9] = tc end
    wk.jobs[#wk.jobs + 1] = entry
    picks[i] = {id, v, tc, h, wk, entry}
  end
  if #picks == count then
    local out = {count, -1, now, #workers}
    -- A worker nobody heard (its consumer is gone): its jobs go to their ready queues, as the general way.
    local unheard = {}
    for w, wk in ipairs(workers) do
      out[4 + w] = #wk.jobs
      if #wk.jobs > 0 and redis.call(publish, wk.channel, cmsgpack.pack(wk.jobs)) == 0 then
        out[4 + w], unheard[wk] = 0, true
      end
    end
    -- Those topics' ready queues: whether each was empty (its wake-up), read before the first write.
    local empty = {}
    for i = 1, count do
      local p = picks[i]
      local t = p[2][2]
      if unheard[p[5]] and empty[t] == nil then
        empty[t] = redis.call('EXISTS', prefix .. ':ready:' .. t) == 0
      end
    end
    if count > 0 then redis.call('ZREMRANGEBYRANK', bucket, '0', count == 1 and '0' or count - 1) end
    local added, to_reserved, to_ready, earliest = {}, {}, {}, nil
    for i = 1, count do
      local p = picks[i]
      local id, v, tc, e = p[1], p[2], p[3], p[6]
      local t, run_at = v[2], due[2 * i] + 0
      if unheard[p[5]] then
        v[1] = tc and 10 or 2
        redis.call('ZADD', prefix .. ':ready:' .. t, rec_score(nil, run_at), id)
        to_ready[t] = (to_ready[t] or 0) + 1
      else
        local d = e[6]
        v[1], v[8], v[9], v[10] = tc and 11 or 3, e[4], d, e[5]
        added[#added + 1] = string.format('%d', d)
        added[#added + 1] = id
        if earliest == nil or d < earliest then earliest = d end
        to_reserved[t] = (to_reserved[t] or 0) + 1
      end
      rec_put(prefix .. ':job:' .. id, v, nil, tc, p[4])
      out[#out + 1] = now - run_at
    end
    if #added > 0 then redis.call('ZADD', reserved, unpack(added)) end
    for t, m in pairs(to_reserved) do
      redis.call('HINCRBY', counts, t .. ':delayed', m == 1 and '-1' or -m)
      redis.call('HINCRBY', counts, t .. ':reserved', m == 1 and '1' or m)
    end
    for t, m in pairs(to_ready) do
      redis.call('HINCRBY', counts, t .. ':delayed', -m)
      redis.call('HINCRBY', counts, t .. ':ready', m)
      if empty[t] then redis.call(publish, ready_channel, t) end
    end
    -- As in reserve.lua: only a deadline earlier than the one announced needs telling.
    local told = earliest and redis.call('GET', announced)
    if earliest and (not told or earliest < told + 0) then
      redis.call('SET', announced, earliest)
      redis.call(publish, timer_channel, reserved .. ' ' .. earliest)
    end
    if next_due then
      out[2] = next_due
    else
      local head = redis.call('ZRANGE', bucket, '0', '0', 'WITHSCORES')
      if head[2] then out[2] = head[2] end
    end
    return out
  end
end
