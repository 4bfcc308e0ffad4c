-- add.lua: new jobs into their partitions. Not a script of its own: it goes after record.lua and flow.lua in
-- front of the scripts that store new jobs (scripts.rs): push.lua, and ack.lua, which stores the jobs a
-- callback's answer (or a pull ack) pushed, together with the ack (docs/architecture.md, "Jobs that
-- start jobs").
--
-- add_job writes a job's record (only where there is none) and gathers its sorted-set adds, counts and
-- wake-ups; add_flush sends them, one ZADD per sorted set and one HINCRBY per count (two when a call's
-- ready jobs of one topic and partition come both with and without flow keys), so a batch costs
-- Redis a few commands beyond its records (and a call's ready jobs with flow keys go through flow.lua
-- together, per partition and topic). Each job's partition is its `prefix`: the counts hash and
-- channels of the caller's first partition are the ones it gives add_flush, another's are named from
-- its prefix (<prefix>:counts, <prefix>:wake:ready, <prefix>:wake:timer), so one call may add jobs of
-- several partitions (push.lua and ack.lua on a single Redis, and on one node of a cluster:
-- add_spread and add_served, at the end).
--
-- KEYS[1]: none of its own (the including script's; keys are named from the partition's prefix)
-- ARGV[1]: none of its own
-- Returns: nothing (defines local functions).
-- (A call carrying several partitions of a cluster node passes some of its keys in ARGV: add_spread.)

-- What add_job gathered for add_flush: made at the first add, so a script that adds nothing (an ack
-- without pushes) makes no table. `sets`: per sorted set (a ready queue or a delay set) one table,
-- {zset, prefix, z (its ZADD's score and member pairs), n (#z), and for a ready queue its topic and the
-- most urgent priority below the default, for a delay set the earliest due time and its jobs per topic
-- (the counts)}, by key in `set_of` and in order in `sets`; `keyed`: the ready jobs with flow keys, per
-- partition and topic (made at the first). One table per set, not one map per what is kept of it: a call
-- of a few jobs, on a cluster or at a low rate, spent much of its time making and filling those maps.
local adding

-- Stores new job `r` (a record table; add_job sets `s`) at `job`, its record key, unless there is a
-- record there (SET NX). `ready` is its topic's ready queue, `delayed` the partition's delay set, `id`
-- its id, `now` Redis's clock (ms); `prefix`, the partition's, names its flow key's keys.
-- Returns the state it went in, or nil when the id was taken (then nothing of it is written).
-- With `ttl` (ms) it is a fan-out's parent: stored done, expiring `ttl` after its due time, in no
-- queue and no count; its work is its children's, stored with it.
local function add_job(prefix, job, ready, delayed, id, r, now, ttl)
  local state = 'delayed'
  if ttl then state = 'done' elseif r.r <= now then state = 'ready' end
  r.s = state
  -- `r.packed`: the record as the caller packed it (push.lua's modes "4" and "5"), in this state.
  if r.packed then
    if not redis.call('SET', job, r.packed, 'NX') then return nil end
  elseif not rec_store(job, r, false, true) then
    return nil
  end
  if ttl then
    redis.call('PEXPIRE', job, math.max(r.r - now, 0) + ttl)
    return state
  end
  local A = adding
  if not A then
    A = {sets = {}, set_of = {}}
    adding = A
  end
  local topic, p = r.t, r.p
  if r.f and state == 'ready' then
    -- Its flow key's, gathered per partition and topic, so add_flush sends a call's keyed jobs through
    -- flow.lua together (straight into the ready queue, or into their keys' queues), in arrival order.
    if not A.keyed then A.keyed, A.keyed_order = {}, {} end
    local g = prefix .. ' ' .. topic
    local kg = A.keyed[g]
    if not kg then
      kg = {prefix = prefix, t = topic, by = {}, keys = {}, n = 0}
      A.keyed[g] = kg
      A.keyed_order[#A.keyed_order + 1] = kg
    end
    kg.n = kg.n + 1
    local e = kg.by[r.f]
    if not e then
      e = {k = r.f, adds = {}}
      kg.by[r.f] = e
      kg.keys[#kg.keys + 1] = e
    end
    local score = rec_score(p, r.r)
    e.adds[#e.adds + 1] = score
    e.adds[#e.adds + 1] = id
    if e.first == nil or score < e.first then e.first = score end
    A.now = now
    return state
  end
  local zset, score = ready, r.r
  if state ~= 'ready' then zset = delayed end
  local set = A.set_of[zset]
  if not set then
    set = {zset = zset, prefix = prefix, z = {}, n = 0}
    if state == 'ready' then set.topic = topic else set.tally = {} end
    A.set_of[zset] = set
    A.sets[#A.sets + 1] = set
  end
  if state == 'ready' then
    if p and p < 1024 and (set.urgent == nil or p < set.urgent) then set.urgent = p end
    score = rec_score(p, r.r)
  else
    if set.earliest == nil or r.r < set.earliest then set.earliest = r.r end
    set.tally[topic] = (set.tally[topic] or 0) + 1
  end
  -- Redis formats a number argument with %.17g, which costs more than this %d (callgrind: about 3%
  -- of a batch push's instructions); %d holds integers below 2^63, a ready score of a priority of
  -- 2^21 or more is past that. The jobs of a call often share a score (one delay, one clock): formatted
  -- once.
  if score ~= A.scored then
    A.scored = score
    if score < 9.2e18 then A.score_text = string.format('%d', score) else A.score_text = score end
  end
  local z, n = set.z, set.n
  z[n + 1], z[n + 2] = A.score_text, id
  set.n = n + 2
  return state
end

-- Sends what add_job gathered: the sorted-set adds, the wake-ups (on each partition's channels), the
-- counts (into each partition's counts hash): for partition `first`, the `counts` hash and channels
-- given.
local function add_flush(first, counts, ready_channel, timer_channel)
  local A = adding
  if not A then return end
  adding = nil
  local function count(prefix, field, k)
    redis.call('HINCRBY', prefix == first and counts or prefix .. ':counts', field, k == 1 and '1' or k)
  end
  -- Keyed ready jobs, per partition and topic: the straight keys' in one flow_straight, the others each
  -- through flow_add_all (a key with a queue or a state: flow_modes).
  for _, kg in ipairs(A.keyed_order or {}) do
    flow().flow_modes(kg.prefix, kg.t, kg.keys)
    local straight = {}
    for _, e in ipairs(kg.keys) do
      if e.mode == 0 then
        straight[#straight + 1] = e
      else
        flow().flow_add_all(kg.prefix, kg.t, e.k, e.adds, e.first, A.now, e.mode)
      end
    end
    if #straight > 0 and flow().flow_straight(kg.prefix, kg.t, straight, A.now) then
      redis.call(publish, kg.prefix .. ':wake:ready', kg.t)
    end
    count(kg.prefix, kg.t .. ':ready', kg.n)
  end
  for _, set in ipairs(A.sets) do
    local zset, topic, prefix = set.zset, set.topic, set.prefix
    local ready_channel, timer_channel = ready_channel, timer_channel
    if prefix ~= first then ready_channel, timer_channel = prefix .. ':wake:ready', prefix .. ':wake:timer' end
    if topic then
      -- Long-polling reservers wait only on an empty queue, so only its first job needs to wake them. A
      -- job more urgent than the default that goes ahead of the queue's first job is told as
      -- "<topic> <priority>", so that reservers ask this partition first (the ready index's hints);
      -- behind a first job as urgent, it is not news.
      local was_empty, ahead = true, false
      local u = set.urgent
      if u then
        local head = redis.call('ZRANGE', zset, '0', '0', 'WITHSCORES')
        was_empty = head[1] == nil
        ahead = was_empty or math.floor(tonumber(head[2]) / 4398046511104) > u
      else
        was_empty = redis.call('EXISTS', zset) == 0
      end
      redis.call('ZADD', zset, unpack(set.z))
      if ahead then
        redis.call(publish, ready_channel, topic .. ' ' .. u)
      elseif was_empty then
        redis.call(publish, ready_channel, topic)
      end
      count(prefix, topic .. ':ready', set.n / 2)
    else
      -- A timer sleeps until the earliest due time it knows; tell it when that just moved earlier.
      local head = redis.call('ZRANGE', zset, '0', '0', 'WITHSCORES')
      redis.call('ZADD', zset, unpack(set.z))
      if head[2] == nil or set.earliest < tonumber(head[2]) then
        redis.call(publish, timer_channel, zset .. ' ' .. set.earliest)
      end
      for t, k in pairs(set.tally) do count(prefix, t .. ':delayed', k) end
    end
  end
end

-- A cluster's call for several partitions of one node (push.lua and ack.lua, as dq-server sends its
-- groups: crates/dq-core/src/store/owners.rs) declares only its first partition's keys. Redis refuses a
-- call whose declared keys hash to several slots, though a script may reach any key of its node's
-- slots. Such a call's ARGV begins with "" (never a first argument of theirs) and the number of the
-- other keys, then those keys: add_spread puts them back at the end of KEYS, and drops the three from
-- ARGV, so that the script reads both as a one-partition call has them. Answers whether it did.
local function add_spread()
  if ARGV[1] ~= '' then return false end
  local m, n, base = tonumber(ARGV[2]), #ARGV, #KEYS
  for k = 1, m do KEYS[base + k] = ARGV[2 + k] end
  for k = m + 3, n do ARGV[k - m - 2] = ARGV[k] end
  for k = n - m - 1, n do ARGV[k] = nil end
  return true
end

-- Whether this node serves each partition of a spread call (their prefixes, as a set: prefix -> true),
-- none of them moving: it reads a key no script writes (<prefix>:here), which Redis refuses on a slot
-- another node serves and, missing, on a slot being migrated or imported. A spread call asks it before
-- it reads or writes anything of its jobs, and answers "moved" when one is not, having done nothing;
-- dq-server then sends its jobs a partition at a time, by calls that follow MOVED and ASK.
local function add_served(prefixes)
  for prefix in pairs(prefixes) do
    local r = redis.pcall('EXISTS', prefix .. ':here')
    if type(r) == 'table' and r.err then return false end
  end
  return true
end
