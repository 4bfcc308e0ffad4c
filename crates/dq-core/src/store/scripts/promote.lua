-- promote.lua: move the jobs of a partition's delay set that are due now to their topics' ready queues,
-- or hand them, reserved, straight to dq-consumer workers that wait for their topic (a hand-off: the job
-- skips the ready queue and the worker's reserve call). Two common calls take a way of their own, each
-- in a file put in front of this one: plain jobs and no worker waiting (promote_plain.lua), and plain jobs
-- all handed (handoff.lua).
-- Atomic, so however many timers run it on the same partition, each due job moves exactly once (invariant 4).
-- One call may promote several partitions of its node (a timer's partitions due at the same moment):
-- the first by its KEYS, the others named by their prefixes (ARGV[9..]), one after another, sharing the
-- call's own cost (Redis's, the preamble's, the clock) and the waiting workers' slots.
--
-- KEYS[1]: the partition's delay set (<prefix>:delayed)
-- KEYS[2]: counts hash (<prefix>:counts)
-- KEYS[3]: the reserved set (<prefix>:reserved)
-- KEYS[4]: the earliest deadline announced to the timers (<prefix>:announced)
-- ARGV[1]: key prefix   ARGV[2]: most jobs to move in this call   ARGV[3]: ready wake channel
-- ARGV[4]: timer wake channel (told `<reserved key> <deadline>` as reserve.lua tells it)
-- ARGV[5]: receipt nonce (random, from the caller)
-- ARGV[6]: "1" when the caller makes promotion spans (it exports them), so wants the moved jobs' trace
--   contexts (see Returns); else ""
-- ARGV[7]: how many more partitions the call promotes (m; absent: 0)   ARGV[8]: "1" when the call must first check
--   that its node serves each of them, none moving (a cluster's: see add.lua's add_served), else ""
-- ARGV[9..8+m]: their key prefixes (their keys, ready and timer channels are named from them)
-- ARGV[9+m..]: the waiting workers, four values each: topic, hand-off channel
--   (<prefix>:wake:to:<consumer>, the first partition's: a process hears all of its own), free slots
--   (over the call's partitions), least TTR in ms. A due job of a waiting worker's topic is
--   reserved for it (attempt + 1, a receipt, a deadline of now + max(its TTR, the least TTR)) and
--   published on its channel, up to its free slots, in the order given. When the publish reaches nobody
--   (the consumer is gone) those jobs go to the ready queue instead. Jobs are handed by priority, then
--   due time, as the ready queue would give them out.
-- Returns: per partition, in order, {moved, next_due (-1 when the delay set is empty; else the score's text as Redis answered
--   it), now, jobs handed to each waiting worker (one value per worker, in the order given) ...,
--   lateness of each moved job in ms ..., then five values for each moved job with a trace context (the
--   record's tc) when ARGV[6] asks for them: id, topic, tc, lateness ms, 1 when handed else 0}
--   (dq-timer's promotion spans; nothing for jobs without one); or "moved" when ARGV[8] asked and a
--   partition is not served here (nothing written).
--   A hand-off message is a MessagePack array of jobs (cmsgpack: whole numbers as integers, where JSON
--   would print them), each [id, topic, body, attempt, receipt, deadline, run_at, ttr] (the fields and
--   order of reserve.lua's answer), and its trace context as a ninth value when the job has one.

local limit, nonce, spans = ARGV[2] + 0, ARGV[5], ARGV[6] == '1'
local m = (ARGV[7] or '0') + 0
if ARGV[8] == '1' then
  for i = 1, m do
    local r = redis.pcall('EXISTS', ARGV[8 + i] .. ':here')
    if type(r) == 'table' and r.err then return 'moved' end
  end
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- The waiting workers (ARGV[wbase + 1..]) and their slots left, taken as the partitions hand them jobs.
local wbase = 8 + m
local nw = math.max(0, math.floor((#ARGV - wbase) / 4))
local left = {}
for w = 1, nw do left[w] = ARGV[wbase + (w - 1) * 4 + 3] + 0 end
-- Receipts are <nonce>.<n>: the k-th partition's numbers start after (k - 1) * limit, so that no two jobs
-- of a call get one receipt.
local rcb = 0

-- Each partition in turn, its answer in `outs`. (A loop, not a function called per partition: the
-- function, made on every call, would hold some thirty names of this chunk, about 13,000 instructions.)
-- `repeat ... until true` lets a partition's way end it with `break`.
local outs = {}
for k = 0, m do
  local bucket, counts, reserved, announced, prefix, ready_channel, timer_channel
  if k == 0 then
    bucket, counts, reserved, announced = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
    prefix, ready_channel, timer_channel = ARGV[1], ARGV[3], ARGV[4]
  else
    -- Each worker's slots less what the partitions before handed it.
    for w = 1, nw do left[w] = left[w] - outs[k][4 + w] end
    prefix, rcb = ARGV[8 + k], k * limit
    bucket, counts, reserved, announced = prefix .. ':delayed', prefix .. ':counts', prefix .. ':reserved',
      prefix .. ':announced'
    ready_channel, timer_channel = prefix .. ':wake:ready', prefix .. ':wake:timer'
  end
  repeat
    -- The delay set's first two members. Unless both are due, they tell the due jobs (none, or the first
    -- alone: on a push path jobs come due apart, and most calls move one) and the next due time after this
    -- call, which the common case below then returns without a ZRANGEBYSCORE before and a ZRANGE after (one
    -- command fewer in a call of about ten).
    local peek = redis.call('ZRANGE', bucket, '0', '1', 'WITHSCORES')
    local due, next_due
    if peek[4] and peek[4] + 0 <= now and limit > 1 then
      due = redis.call('ZRANGEBYSCORE', bucket, '-inf', now, 'WITHSCORES', 'LIMIT', '0', ARGV[2])
    elseif peek[2] and peek[2] + 0 <= now and limit > 0 then
      due, next_due = {peek[1], peek[2]}, peek[4] or -1
    else
      due, next_due = {}, peek[2] or -1
    end
    local count = #due / 2

    -- The common case first: no worker waits, and every due job is a plain one (promote_plain.lua).
    if nw == 0 then
      local out = promote_plain(bucket, counts, prefix, due, count, now, next_due, spans, ready_channel)
      if out then
        outs[k + 1] = out
        break
      end
    end

    -- Workers wait: a call whose every due job is a plain one they take is handed the fast way (handoff.lua).
    if nw > 0 then
      local out = handoff_plain(bucket, counts, reserved, announced, prefix, due, count, now, next_due, nonce, spans,
        ready_channel, timer_channel, wbase, nw, left, rcb)
      if out then
        outs[k + 1] = out
        break
      end
    end

    local recs = {}
    local per_topic = {}
    -- topic -> the most urgent priority below the default among its jobs moved to the ready queue
    local urgent = {}
    local was_empty = {}
    -- The waiting workers; `wanted`: the topics one with free slots takes (their jobs may be handed, which
    -- needs the whole record).
    local waiting = {}
    local wanted = {}
    for w = 1, nw do
      local a = wbase + (w - 1) * 4
      local slots = left[w]
      waiting[w] = {topic = ARGV[a + 1], channel = ARGV[a + 2], slots = slots, ttr = ARGV[a + 4] + 0, jobs = {}}
      if slots > 0 then wanted[ARGV[a + 1]] = true end
    end
    -- Flow keys' turns parked in the delay set (flow.lua), due now: i -> {topic, key}. Due jobs with a flow
    -- key, by key ("<topic> <key>" -> {t, k, adds, first}, and in `keyed_order`): one ZADD and one count per
    -- key, and their turns one ZADD per topic; by topic (`keyed_by_topic`, `keyed_topics`). Each topic's
    -- keys (`flow_topics`) and its keys' modes (flow_modes: one EXISTS over their queues and states) are
    -- read before the first write.
    local turns, keyed, keyed_order, keyed_by_topic, keyed_topics, flow_topics = {}, {}, {}, {}, {}, {}
    -- key_of[i]: due job i's entry in `keyed`, when it has a flow key; rec_keys[i]: its record's key.
    local key_of, rec_keys = {}, {}
    -- Every key is read before the first write (see architecture.md, "Scripts on a moving slot").
    for i = 1, count do
      local member = due[2 * i - 1]
      local key = prefix .. ':job:' .. member
      rec_keys[i] = key
      local raw = string.byte(member, 1) ~= 126 and redis.pcall('GET', key)
      local topic, traced, fk, at = rec_topic(raw)
      local r
      if not raw then
        local tp, k = string.match(member, '^~(%S+) (.+)$')
        if tp then
          turns[i] = {tp, k}
          flow().flow_read(prefix, tp, k)
        end
      elseif topic and (fk or not wanted[topic]) and not (traced and spans) then
        -- Going to its ready queue, or its flow key's (a keyed job is never handed): only its topic, flow
        -- key and state are needed (rec_topic says it has no priority, and the trace context that follows
        -- its array is not wanted), and how the state is stored.
        r = {s = 'delayed', t = topic, f = fk, at = at, sf = traced and 8 or 0}
      elseif raw then
        r = rec_load(key, false, bucket, due[2 * i], raw)
      end
      if r and r.f then
        local name = r.t .. ' ' .. r.f
        local e = keyed[name]
        if not e then
          e = {t = r.t, k = r.f, adds = {}}
          keyed[name] = e
          keyed_order[#keyed_order + 1] = e
          local l = keyed_by_topic[r.t]
          if not l then
            l = {}
            keyed_by_topic[r.t] = l
            keyed_topics[#keyed_topics + 1] = r.t
            flow_topics[#flow_topics + 1] = prefix .. ':flows:' .. r.t
            flow_topics[#flow_topics + 1] = prefix .. ':ready:' .. r.t
            flow_topics[#flow_topics + 1] = prefix .. ':fv:' .. r.t
          end
          l[#l + 1] = e
        end
        key_of[i] = e
      end
      recs[i] = r
      if r then per_topic[r.t] = 0 end
    end
    for i = 1, #flow_topics, 2000 do redis.call('EXISTS', unpack(flow_topics, i, math.min(i + 1999, #flow_topics))) end
    for _, t in ipairs(keyed_topics) do flow().flow_modes(prefix, t, keyed_by_topic[t]) end

    -- The waiting workers of the due jobs' topics, by topic; each takes jobs up to its free slots.
    local by_topic = {}
    for w, wk in ipairs(waiting) do
      if wk.slots > 0 and per_topic[wk.topic] then
        by_topic[wk.topic] = by_topic[wk.topic] or {}
        table.insert(by_topic[wk.topic], w)
      end
    end
    -- handed_to[i]: the worker job i went to (nil: the ready queue); entry[i]: its entry in the message.
    local handed_to, entry = {}, {}
    local n = 0
    -- The due jobs are handed in due order, unless some have a priority: then `turn` lists them by priority
    -- first, as the ready queue would give them out (only when a worker waits: else nothing is handed).
    local turn
    if next(by_topic) then
      for i = 1, count do
        if recs[i] and recs[i].p then turn = {} break end
      end
    end
    if turn then
      for i = 1, count do turn[i] = i end
      table.sort(turn, function(x, y)
        local px, py = recs[x] and recs[x].p or 1024, recs[y] and recs[y].p or 1024
        if px ~= py then return px < py end
        return x < y
      end)
    end
    for k = 1, count do
      local i = turn and turn[k] or k
      local r = recs[i]
      -- A job with a flow key waits for its key's turn (flow.lua): it is never handed.
      local ws = r and not r.f and by_topic[r.t]
      if ws then
        for _, w in ipairs(ws) do
          local wk = waiting[w]
          if #wk.jobs < wk.slots then
            n = n + 1
            local id = due[2 * i - 1]
            local ttr = math.max(r.ttr, wk.ttr)
            local a, rc, d = r.a + 1, nonce .. '.' .. (rcb + n), now + ttr
            entry[i] = {id, r.t, r.b, a, rc, d, r.r, ttr}
            if r.tc then entry[i][9] = r.tc end
            table.insert(wk.jobs, entry[i])
            handed_to[i] = w
            break
          end
        end
      end
    end
    local handed = {}
    for w = 1, #waiting do
      local wk = waiting[w]
      handed[w] = #wk.jobs
      if #wk.jobs > 0 and redis.call(publish, wk.channel, cmsgpack.pack(wk.jobs)) == 0 then
        -- Nobody listens on the channel: its jobs go to the ready queue.
        handed[w] = 0
        for i = 1, count do
          if handed_to[i] == w then handed_to[i] = nil end
        end
      end
    end

    -- Whether each ready queue that gets jobs was empty (its wake-up), read once the hand-offs are known
    -- (a topic whose every job was handed needs no look) and before the first write; and for a topic
    -- getting jobs more urgent than the default (`urgent`), the priority of the queue's first job
    -- (`head_p`): as in push.lua, only one that goes ahead of it is told.
    local head_p = {}
    for i = 1, count do
      local r = recs[i]
      if r and not handed_to[i] and r.p and r.p < 1024 and (urgent[r.t] == nil or r.p < urgent[r.t]) then
        urgent[r.t] = r.p
      end
    end
    for i = 1, count do
      local r = recs[i]
      if r and not handed_to[i] and was_empty[r.t] == nil then
        local key = prefix .. ':ready:' .. r.t
        if urgent[r.t] then
          local head = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
          was_empty[r.t] = head[1] == nil
          if head[2] then head_p[r.t] = math.floor(tonumber(head[2]) / 4398046511104) end
        else
          was_empty[r.t] = redis.call('EXISTS', key) == 0
        end
      end
    end

    local out = {0, -1, now, #waiting}
    for w = 1, #waiting do out[#out + 1] = handed[w] end
    local head_len = #out
    -- The due ids are the delay set's first ones, in rank order.
    if count > 0 then redis.call('ZREMRANGEBYRANK', bucket, '0', count - 1) end
    local to_reserved = {}
    local earliest
    -- The moved jobs with a trace context: {id, topic, tc, lateness, handed}, returned after the lateness.
    local traced = {}
    -- Members added, per sorted set: one ZADD per set, not one per job (each call is most of a job's cost
    -- here), in slices that stay within what Lua's unpack takes.
    local adds, order = {}, {}
    local function add(key, score, id)
      local a = adds[key]
      if not a then
        a = {}
        adds[key] = a
        order[#order + 1] = key
      end
      a[#a + 1] = score
      a[#a + 1] = id
    end
    for i = 1, count do
      local id, run_at, r = due[2 * i - 1], due[2 * i] + 0, recs[i]
      -- An id without a record was deleted half-way by hand; there is nothing to deliver.
      if r then
        local w = handed_to[i]
        if w then
          -- Reserved under the receipt and deadline its worker was sent.
          local j = entry[i]
          r.a, r.rc, r.d = j[4], j[5], j[6]
          r.s = 'reserved'
          rec_store(rec_keys[i], r)
          add(reserved, r.d, id)
          if earliest == nil or r.d < earliest then earliest = r.d end
          to_reserved[r.t] = (to_reserved[r.t] or 0) + 1
        else
          if r.f then
            local e, score = key_of[i], rec_score(r.p, run_at)
            e.adds[#e.adds + 1] = score
            e.adds[#e.adds + 1] = id
            if e.first == nil or score < e.first then e.first = score end
          else
            add(prefix .. ':ready:' .. r.t, rec_score(r.p, run_at), id)
          end
          r.s = 'ready'
          rec_store(rec_keys[i], r, true)
          per_topic[r.t] = per_topic[r.t] + 1
        end
        out[#out + 1] = now - run_at
        if spans and r.tc then traced[#traced + 1] = {id, r.t, r.tc, now - run_at, w and 1 or 0} end
      elseif turns[i] then
        -- A parked turn whose token or pause came: back in line, if its key still has ready jobs.
        local tp, k = turns[i][1], turns[i][2]
        local head = redis.call('ZRANGE', prefix .. ':fq:' .. tp .. ':' .. k, '0', '0', 'WITHSCORES')
        if head[2] then flow().flow_turn(prefix, tp, k, math.floor(tonumber(head[2]) / FLOW_STEP) * FLOW_STEP + now, now) end
      end
    end
    -- The keyed jobs, a topic at a time: a straight key's into the ready queue with the topic's other jobs
    -- (flow_straight, through `add`); a turn-taking key's into its queue (flow_enqueue_all), and a key that
    -- had no queue gets its turn, one that had one has its turn moved earlier if these are more urgent. The
    -- reservers of a queue that was empty are woken below, with the topic's unkeyed jobs.
    for _, t in ipairs(keyed_topics) do
      local straight, by_turns = {}, {}
      for _, e in ipairs(keyed_by_topic[t]) do
        if e.first then
          local into = e.mode == 0 and straight or by_turns
          into[#into + 1] = e
        end
      end
      if #straight > 0 then flow().flow_straight(prefix, t, straight, now, add) end
      if #by_turns > 0 then flow().flow_enqueue_all(prefix, t, by_turns) end
    end
    for _, e in ipairs(keyed_order) do
      if e.first and e.mode == 1 then
        flow().flow_turn(prefix, e.t, e.k, e.first, now, true)
      elseif e.first and e.mode == 2 and e.added > 0 then
        add(prefix .. ':ready:' .. e.t .. ' XX', e.first, '~' .. e.k)
      end
    end
    for _, key in ipairs(order) do
      local a = adds[key]
      -- Turns: "<ready key> XX" for keys that had one (moved earlier only).
      local set, how = string.match(key, '^(.*) (%u%u)$')
      for k = 1, #a, 2000 do
        if how == 'XX' then
          redis.call('ZADD', set, 'XX', 'LT', unpack(a, k, math.min(k + 1999, #a)))
        else
          redis.call('ZADD', key, unpack(a, k, math.min(k + 1999, #a)))
        end
      end
    end
    for topic, m in pairs(per_topic) do
      local h = to_reserved[topic] or 0
      if m + h > 0 then redis.call('HINCRBY', counts, topic .. ':delayed', -(m + h)) end
      if m > 0 then redis.call('HINCRBY', counts, topic .. ':ready', m) end
      if h > 0 then redis.call('HINCRBY', counts, topic .. ':reserved', h) end
      -- As push.lua: the first job wakes a waiter; a job more urgent than the default that goes ahead of the
      -- queue's first job is told besides.
      if m > 0 and urgent[topic] and (head_p[topic] == nil or head_p[topic] > urgent[topic]) then
        redis.call(publish, ready_channel, topic .. ' ' .. urgent[topic])
      elseif m > 0 and was_empty[topic] then
        redis.call(publish, ready_channel, topic)
      end
    end
    -- As in reserve.lua: only a deadline earlier than the one announced needs telling.
    local told = earliest and redis.call('GET', announced)
    if earliest and (not told or earliest < told + 0) then
      redis.call('SET', announced, earliest)
      redis.call(publish, timer_channel, reserved .. ' ' .. earliest)
    end
    out[1] = #out - head_len
    for _, tj in ipairs(traced) do
      for k = 1, 5 do out[#out + 1] = tj[k] end
    end
    -- (Read, not the peek's: a flow key's turn may have been parked in the delay set above. The two fast
    -- ways fill it in as their own few lines, not a shared function: a function is made on every call,
    -- about 1,000 instructions of a one-job call's 142,000.)
    local head = redis.call('ZRANGE', bucket, '0', '0', 'WITHSCORES')
    if head[2] then out[2] = head[2] end
    outs[k + 1] = out
  until true
end
return outs
