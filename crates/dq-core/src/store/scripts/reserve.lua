-- reserve.lua: hand out up to `count` ready jobs, taking the topics in priority order, each under a
-- fresh receipt and a deadline of now + its TTR.
--
-- KEYS[1]: the reserved set (<prefix>:reserved)
-- KEYS[2]: counts hash (<prefix>:counts)
-- KEYS[3]: the earliest deadline announced to the timers (<prefix>:announced)
-- KEYS[4..]: ready queues (<prefix>:ready:<topic>), highest priority first
-- ARGV[1]: key prefix   ARGV[2]: count   ARGV[3]: receipt nonce (random, from the caller)
-- ARGV[4]: least TTR in ms ("" for none): dq-consumer's reservations must outlive its callback's timeout
-- ARGV[5]: timer wake channel, told `<reserved key> <deadline>` when a deadline is earlier than the one
-- last announced, so a timer ends the reservation on time without sweeping for it
-- ARGV[6]: "1" to take each job from the queue whose first job comes first (lowest score, then lowest
-- id), as beanstalkd's reserve takes the best job of every watched tube; "" for the queues in the order
-- given
-- ARGV[7..]: per ready queue, in the order of KEYS[4..], its topic's `flow` limits:
-- "<concurrency> <rate_per_s> <burst>", 0 for none of each (flow.lua). A flow key's turn popped from a
-- queue gives the key's first job when the key is under its limits, and goes back to the end of the
-- line; a key at its concurrency loses its turn until a reservation of it ends, one without a token or
-- paused has it parked in the delay set until then. When fewer jobs than asked were left, the keys that
-- gave one give more, a round at a time, as their limits allow. A straight key's job (flow.lua) is
-- taken as it comes, unless its topic has limits or its key a state: then it goes into its key's
-- queue, and the key takes turns.
-- Returns: a flat array, per job: id, topic, body, attempt, receipt, deadline, run_at, ttr (the
-- reservation's length in ms, so a worker can touch at half of it without comparing clocks), flow key
-- ("" for none), trace context (the record's tc, "" for none); then 1 when the
-- queues may still hold jobs (a topic's count says so, or they do), 0 when they are empty (the caller's
-- process then knows, without another call, that nobody needs waking for them).

local reserved, counts, announced = KEYS[1], KEYS[2], KEYS[3]
local prefix, want, nonce = ARGV[1], ARGV[2] + 0, ARGV[3]
local least_ttr = tonumber(ARGV[4]) or 0
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- Each ready queue is popped first (ZPOPMIN: one call, where reading it with ZRANGE and then removing
-- what was read would be two), and every popped job's record is read before the first record is
-- written. A record the script cannot read (on a slot being moved, see architecture.md, "Scripts on a
-- moving slot") puts everything popped back and fails the call, so it is sent again: nothing changed.
-- jobs: {id, record's array, flow key (false for none), trace context, history (rec_fields: the record
-- is read and written by position, v[2] its topic, v[3] body, v[4] run_at, v[5] ttr, v[8] attempts),
-- score = its ready score for a straight job, skip = true once it went into its key's queue instead} in
-- the order taken; popped: {key, score, member} of everything popped.
local jobs, popped = {}, {}
local taken = 0
-- The flow keys whose turn was popped (or that took turns here), in order; each {t, k, q (its queue),
-- st (its state, for a topic with limits or a key converted), conc, rate, burst, n, tk, ts, u, turn (the
-- turn's score, until its first job is taken), left (jobs it gave up from its queue), conv (straight jobs
-- put into its queue), last (the score of the last job it gave up), gave (jobs taken), held / park /
-- empty (why its turn is out), later (where it went back when its next job is less urgent)};
-- `flow_of`: the same by "<topic> <key>".
local flow_order, flow_of = {}, {}
-- Per ready queue, its topic's limits: {concurrency, rate, burst}.
local limits = {}
for k = 4, #KEYS do
  local c, rt, b = string.match(ARGV[k + 3] or '', '^(%d+) ([%d.]+) (%d+)$')
  limits[KEYS[k]] = {tonumber(c) or 0, tonumber(rt) or 0, tonumber(b) or 0}
end

-- Flow key k of ready queue `key`'s topic tp, as this call knows it: made at its first turn (`turn`,
-- its score) or conversion, when its state is read (a topic without limits keeps none for its keys but
-- a pause, and a paused key's turn is parked, never in line: only a converted key's is read then).
local function flow_get(key, tp, k, turn, converted)
  local f = flow_of[tp .. ' ' .. k]
  if f and converted and not f.st then
    f.st = prefix .. ':fs:' .. tp .. ':' .. k
    f.u = tonumber(redis.call('HGET', f.st, 'u')) or 0
  end
  if f then
    f.turn = turn
    return f
  end
  local lim = limits[key]
  f = {t = tp, k = k, q = prefix .. ':fq:' .. tp .. ':' .. k, conc = lim[1], rate = lim[2], burst = lim[3],
    n = 0, u = 0, turn = turn, left = 0, conv = 0, gave = 0}
  flow_of[tp .. ' ' .. k] = f
  if f.conc > 0 or f.rate > 0 or converted then
    f.st = prefix .. ':fs:' .. tp .. ':' .. k
    local s = redis.call('HMGET', f.st, 'n', 'tk', 'ts', 'u')
    f.n, f.u = tonumber(s[1]) or 0, tonumber(s[4]) or 0
    f.tk, f.ts = tonumber(s[2]) or f.burst, tonumber(s[3]) or now
  end
  return f
end

-- Takes one job of flow key `f` if its limits allow; an error once a record cannot be read.
local function flow_take(f)
  if f.u > now then
    f.park = f.u
    return
  end
  if f.conc > 0 and f.n >= f.conc then
    f.held = true
    return
  end
  if f.rate > 0 then
    f.tk = math.min(f.burst, f.tk + math.max(0, now - f.ts) * f.rate / 1000)
    f.ts = now
    if f.tk < 1 then
      f.park = now + math.ceil((1 - f.tk) * 1000 / f.rate)
      return
    end
  end
  local head = redis.call('ZPOPMIN', f.q, 1)
  if #head == 0 then
    f.empty = true
    return
  end
  popped[#popped + 1] = {f.q, head[2], head[1]}
  if f.turn then
    -- A turn goes back in line with the priority of the job its key gave last (below), which saves
    -- reading the next one; when the next is less urgent, the turn goes back at its priority instead.
    local p = math.floor(tonumber(head[2]) / FLOW_STEP)
    if p > math.floor(f.turn / FLOW_STEP) then
      redis.call('ZADD', f.q, head[2], head[1])
      f.later = p * FLOW_STEP + f.turn % FLOW_STEP
      return
    end
    f.turn = nil
  end
  f.left, f.last = f.left + 1, head[2]
  local v, fk, tc, h = rec_fields(prefix .. ':job:' .. head[1], true, f.q, head[2])
  if not v and fk then return fk end
  if v then
    f.n, f.gave = f.n + 1, f.gave + 1
    if f.rate > 0 then f.tk = f.tk - 1 end
    jobs[#jobs + 1] = {head[1], v, f.k, tc, h}
    taken = taken + 1
  end
end

-- A straight job (id m, at `score` in ready queue `key`) of flow key k that must take turns (its
-- topic has limits, or its key a state): into its key's queue, and the key takes one of its jobs as a
-- turn would. Returns an error once a record cannot be read. A call converts at most CONVERTS_MAX jobs
-- (limits set on a topic with a long straight backlog would otherwise make one long call of it), and
-- then answers that the queues may hold more.
local CONVERTS_MAX = 1000
local converts = 0
local function convert(key, m, score, k)
  converts = converts + 1
  local f = flow_get(key, string.sub(key, #prefix + 8), k, nil, true)
  redis.call('ZADD', f.q, score, m)
  f.conv = f.conv + 1
  popped[#popped + 1] = {f.q, false, m}
  -- (A queue found empty earlier in this call has a job now.)
  f.empty = nil
  if not f.listed then
    f.listed = true
    flow_order[#flow_order + 1] = f
  end
  return flow_take(f)
end

-- Pops up to n members of ready queue `key`: jobs, and flow keys' turns, each giving a job of its key.
-- Returns whether anything was popped, and an error once a record cannot be read.
local function take(key, n)
  local got = redis.call('ZPOPMIN', key, n == want and ARGV[2] or n)
  local tp = string.sub(key, #prefix + 8)
  -- The straight jobs popped here of a topic without limits (indexes in `jobs`): taken, unless their
  -- key has a state (one EXISTS for all).
  local straight = {}
  for j = 1, #got, 2 do
    local m, score = got[j], got[j + 1]
    popped[#popped + 1] = {key, score, m}
    local err
    if string.byte(m, 1) == 126 then
      -- '~': a flow key's turn.
      local f = flow_get(key, tp, string.sub(m, 2), tonumber(score))
      err = flow_take(f)
      -- A turn that went back in line at its key's next priority may be popped again in this call.
      if f.later then
        redis.call('ZADD', key, f.later, m)
        f.later = nil
      elseif not f.listed then
        f.listed = true
        flow_order[#flow_order + 1] = f
      end
    else
      local v, fk, tc, h = rec_fields(prefix .. ':job:' .. m, true, key, score)
      if not v then
        err = fk
      elseif fk then
        local lim = limits[key]
        if lim[1] > 0 or lim[2] > 0 then
          err = convert(key, m, score, fk)
        else
          jobs[#jobs + 1] = {m, v, fk, tc, h, score = score}
          taken = taken + 1
          straight[#straight + 1] = #jobs
        end
      else
        jobs[#jobs + 1] = {m, v, false, tc, h}
        taken = taken + 1
      end
    end
    if err then return true, err end
  end
  -- (A topic without limits has states only for keys that may be paused: none without its mark, fp.)
  if #straight > 0 and redis.call('EXISTS', prefix .. ':fp:' .. tp) == 1 then
    local states = {}
    for i, x in ipairs(straight) do states[i] = prefix .. ':fs:' .. tp .. ':' .. jobs[x][3] end
    if redis.call('EXISTS', unpack(states)) > 0 then
      for i, x in ipairs(straight) do
        if redis.call('EXISTS', states[i]) == 1 then
          local job = jobs[x]
          job.skip = true
          taken = taken - 1
          local err = convert(key, job[1], job.score, job[3])
          if err then return true, err end
        end
      end
    end
  end
  return #got > 0
end
local err
if ARGV[6] == '1' and #KEYS > 4 then
  -- One job at a time, from the queue with the best first job.
  while taken < want and not err and converts < CONVERTS_MAX do
    local best, bs, bid
    for k = 4, #KEYS do
      local h = redis.call('ZRANGE', KEYS[k], '0', '0', 'WITHSCORES')
      if h[1] then
        local s = tonumber(h[2])
        if best == nil or s < bs or (s == bs and h[1] < bid) then best, bs, bid = KEYS[k], s, h[1] end
      end
    end
    if best == nil then break end
    local _
    _, err = take(best, 1)
  end
else
  for k = 4, #KEYS do
    local any = true
    -- Again while turns gave nothing and the queue has more.
    while taken < want and any and not err and converts < CONVERTS_MAX do any, err = take(KEYS[k], want - taken) end
  end
end
-- Fewer than asked: the queues are empty but for the turns taken out; the keys that gave a job give
-- more, a round at a time, as their limits allow.
local progress = true
while taken < want and progress and not err do
  progress = false
  for _, f in ipairs(flow_order) do
    if taken >= want or err then break end
    if f.gave > 0 and not (f.park or f.held or f.empty) then
      local before = taken
      err = flow_take(f)
      if taken > before then progress = true end
    end
  end
end
if err then
  for q = #popped, 1, -1 do
    local p = popped[q]
    -- (A straight job put in its key's queue has `false` for a score: it comes out of it.)
    if p[2] then redis.call('ZADD', p[1], p[2], p[3]) else redis.call('ZREM', p[1], p[3]) end
  end
  return redis.error_reply(err)
end

local out = {}
local n = 0
local earliest
-- Jobs moved from ready to reserved, per topic: the counts change once per topic, not per job.
local moved = {}
-- The reserved set's new members: one ZADD for all (each call is much of a job's cost here).
local added = {}
for _, job in ipairs(jobs) do
  -- (A straight job that went into its key's queue is not taken.)
  if not job.skip then
    local id, v, tc = job[1], job[2], job[4]
    n = n + 1
    -- Reserved (state 3, 8 more with a trace context), one more attempt, a receipt and a deadline: the
    -- array's fields 1, 8, 9 and 10, the rest as read.
    local a, ttr, topic = (v[8] or 0) + 1, math.max(v[5], least_ttr), v[2]
    local rc, d = nonce .. '.' .. n, now + ttr
    v[1], v[8], v[9], v[10] = tc and 11 or 3, a, d, rc
    rec_put(prefix .. ':job:' .. id, v, job[3] or nil, tc, job[5])
    added[#added + 1] = string.format('%d', d)
    added[#added + 1] = id
    if earliest == nil or d < earliest then earliest = d end
    moved[topic] = (moved[topic] or 0) + 1
    out[#out + 1] = id
    out[#out + 1] = topic
    out[#out + 1] = v[3]
    out[#out + 1] = a
    out[#out + 1] = rc
    out[#out + 1] = d
    out[#out + 1] = v[4]
    out[#out + 1] = ttr
    out[#out + 1] = job[3] or ''
    out[#out + 1] = tc or ''
  end
end
-- The flow keys: their state, their ready counts, and their turns: back at the end of the line (the
-- priority of the key's last job taken, the time now; one ZADD per queue), parked, or out.
local turned = false
local back, back_order = {}, {}
-- Each key's jobs in its queue (its count, flow.lua): down by the jobs taken from it, up by the straight
-- jobs put into it, 0 for a queue found empty; read for the keys of a topic in one ZMSCORE and written
-- back in one ZADD and one ZREM (a straight job taken as it came is counted nowhere). `count`: per topic,
-- {keys, at (key -> index), n (net taken), empty (found empty), left (its count after)}.
local count = {}
for _, f in ipairs(flow_order) do
  if f.left > 0 or f.conv > 0 or f.empty then
    local c = count[f.t]
    if not c then
      c = {keys = {}, at = {}, n = {}, empty = {}, left = {}}
      count[f.t] = c
    end
    local i = #c.keys + 1
    c.keys[i], c.at[f.k], c.n[i], c.empty[i] = f.k, i, f.left - f.conv, f.empty
  end
end
-- A topic whose straight jobs were taken keeps its keys' starts a while longer (flow.lua).
local straight_topics = {}
for _, job in ipairs(jobs) do
  if job.score and not job.skip then straight_topics[job[2][2]] = true end
end
for t, c in pairs(count) do
  local flows = prefix .. ':flows:' .. t
  for i = 1, #c.keys, 1000 do
    local got = redis.call('ZMSCORE', flows, unpack(c.keys, i, math.min(i + 999, #c.keys)))
    for j = 1, #got do
      local x = i + j - 1
      c.left[x] = c.empty[x] and 0 or (tonumber(got[j]) or 0) - c.n[x]
    end
  end
end
for _, f in ipairs(flow_order) do
  -- Whether the key may have jobs left in its queue: none when it ran out, else as its count says. A
  -- count that says none for a queue not seen empty is checked (one ZCARD a drained key): a count an
  -- earlier release kept (it counted straight jobs too), or one gone wrong, never strands a queue
  -- without its turn.
  local left = 1
  local c = count[f.t]
  local i = c and c.at[f.k]
  if f.empty then
    left = 0
  elseif i then
    left = c.left[i]
    if left <= 0 then
      left = redis.call('ZCARD', f.q)
      c.left[i] = left
    end
  end
  -- A topic without limits keeps no state for its keys (nothing counts against them).
  if (f.conc > 0 or f.rate > 0) and (f.gave > 0 or f.held or f.rate > 0) then
    local w = {'n', f.n}
    if f.rate > 0 then
      w[#w + 1], w[#w + 2], w[#w + 3], w[#w + 4] = 'tk', tostring(f.tk), 'ts', f.ts
    end
    if f.held then w[#w + 1], w[#w + 2] = 'b', 1 end
    redis.call('HSET', f.st, unpack(w))
    if f.n > 0 then
      redis.call('PERSIST', f.st)
    else
      redis.call('PEXPIRE', f.st, math.max(FLOW_IDLE_MS, f.u - now + 1000))
    end
  end
  if not f.held and left > 0 then
    if f.park then
      flow().flow_park(prefix, f.t, f.k, f.park)
    else
      local ready = prefix .. ':ready:' .. f.t
      if not back[ready] then
        back[ready] = {}
        back_order[#back_order + 1] = ready
      end
      local b = back[ready]
      b[#b + 1] = math.floor(tonumber(f.last) / FLOW_STEP) * FLOW_STEP + now
      b[#b + 1] = '~' .. f.k
      turned = true
    end
  end
end
for t, c in pairs(count) do
  local flows, set, gone = prefix .. ':flows:' .. t, {}, {}
  for x, k in ipairs(c.keys) do
    if c.left[x] > 0 then
      set[#set + 1] = c.left[x]
      set[#set + 1] = k
    else
      gone[#gone + 1] = k
    end
  end
  for k = 1, #set, 2000 do redis.call('ZADD', flows, unpack(set, k, math.min(k + 1999, #set))) end
  for k = 1, #gone, 1000 do redis.call('ZREM', flows, unpack(gone, k, math.min(k + 999, #gone))) end
end
for t in pairs(straight_topics) do redis.call('PEXPIRE', prefix .. ':fv:' .. t, FLOW_IDLE_MS) end
for _, ready in ipairs(back_order) do
  local b = back[ready]
  for k = 1, #b, 2000 do redis.call('ZADD', ready, unpack(b, k, math.min(k + 1999, #b))) end
end
for k = 1, #added, 2000 do redis.call('ZADD', reserved, unpack(added, k, math.min(k + 1999, #added))) end
-- Whether a topic taken from still has ready jobs here, as its count says after this reserve.
local counted_more = false
for topic, m in pairs(moved) do
  if redis.call('HINCRBY', counts, topic .. ':ready', m == 1 and '-1' or -m) > 0 then counted_more = true end
  redis.call('HINCRBY', counts, topic .. ':reserved', m == 1 and '1' or m)
end
-- The timer holding the partition runs expiry by the announced deadline at the latest, and learns the
-- next one then (expire.lua), so only a deadline earlier than that needs announcing.
local told = earliest and redis.call('GET', announced)
if earliest and (not told or earliest < told + 0) then
  redis.call('SET', announced, earliest)
  redis.call(publish, ARGV[5], reserved .. ' ' .. earliest)
end
-- Taking fewer than asked emptied every queue; taking all that was asked may have left some. A count
-- above 0 says so without a look at the queues (a count too high costs one reserve that finds the queue
-- empty later, and nothing else); otherwise the queues are looked at, so that a count too low never
-- hides ready jobs from the caller's index.
local more = 0
if taken >= want then
  if counted_more then more = 1 else more = redis.call('EXISTS', unpack(KEYS, 4)) end
end
if turned or converts >= CONVERTS_MAX then more = 1 end
out[#out + 1] = math.min(more, 1)
return out
