-- ack.lua: finish reserved jobs: each is done, kept for lookups for the retention period (the beanstalkd
-- protocol's delete passes 0: beanstalkd's delete leaves nothing, and its clients delete at a rate that
-- retained records would make a memory cost).
-- One call carries the acks that dq's group commit gathered (one, or many at once), of the partitions of
-- one node: on a single Redis (standalone, Sentinel) of any partitions, on a cluster of those its node
-- serves, since each job's keys are named from its own partition's prefix, its record's key without
-- ':job:<id>'. A cluster's call of several partitions declares only KEYS[1..3] and passes the records'
-- keys in ARGV (add.lua's add_spread), and does nothing, answering "moved", when one of its partitions
-- is not served by this node or its slot is moving (add_served).
--
-- KEYS[1]: the reserved set (<prefix>:reserved) of the first job's partition
-- KEYS[2]: its counts hash (<prefix>:counts)
-- KEYS[3]: its beanstalkd numbers' index (<prefix>:bs:ids)
-- KEYS[4..]: the jobs' records (<prefix>:job:<id>), one per ack (another partition's reserved set,
-- counts hash and numbers' index, and every job's flow key's keys, are named from its prefix; see
-- flow.lua)
-- ARGV[1]: done retention in ms (0 = delete the record now)
-- ARGV[2..]: per ack, its id, its receipt, its attempt's entry for the job's history ("" for none;
-- record.lua, rec_attempt), the jobs it pushes ("" for none) and the callback's answer for its success
-- hook ("" for none): ARGV[5k-3], ARGV[5k-2], ARGV[5k-1], ARGV[5k], ARGV[5k+1] go with KEYS[3+k]. The
-- answer (JSON) is kept at <prefix>:answer:<id> (7 days at most) and the hook queued in
-- <prefix>:success_hooks as "0 <now> <topic> <id>", due now, for dq-checker to send
-- (callback.on_success_url). The jobs pushed are a MessagePack array of jobs, each an array
-- {suffix, topic, body, delay_ms or false, run_at or false, ttr_ms, max_attempts, max_age_ms or false,
-- backoff list or false, priority or false, fan-out ttl ms or false, children's suffixes or false, trace
-- context (as the record's tc) or false}: the
-- job's id is the acked job's and "~<suffix>"; a suffix that holds "~" is a pushed job's own child (a
-- fan-out's, stored done with its ttl, see add.lua). They are stored with the ack, and only with it: a
-- stale ack stores none, and the ids, made from the acked job's, are stored at most once (a record
-- already at an id is left as it is).
-- Returns: "moved" (see above), or per ack, in order: 1 acked, 0 no such job, -1 stale receipt (the reservation it names is over;
-- nothing changed).

local spread = add_spread()
local retention = ARGV[1] + 0
-- Every record is read before the first write (see architecture.md, "Scripts on a moving slot").
local recs = {}
-- stateful[k]: the k-th job's flow key has a state (flow.lua), for flow_count to count down.
local stateful = {}
-- pre[k]: the k-th job's partition prefix; and the time, for flow keys and pushes.
local pre, now = {}, nil
for k = 1, #KEYS - 3 do pre[k] = string.sub(KEYS[3 + k], 1, -(#ARGV[5 * k - 3] + 6)) end
if spread then
  local prefixes = {}
  for k = 1, #pre do prefixes[pre[k]] = true end
  if not add_served(prefixes) then return 'moved' end
end
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = t[1] * 1000 + math.floor(t[2] / 1000)
  end
  return now
end
-- pushes[k]: the jobs the k-th ack pushes, decoded, their keys read before the first write.
local pushes = {}
-- The states of the jobs' flow keys: a key of a topic without limits has none, and an ack leaves it
-- alone (flow_count); one EXISTS over them all says when none has one, else each is asked.
local states = {}
for k = 1, #KEYS - 3 do
  local r = rec_load(KEYS[3 + k]) or false
  recs[k] = r
  if r and r.f then states[#states + 1] = pre[k] .. ':fs:' .. r.t .. ':' .. r.f end
end
local any_state = false
for i = 1, #states, 1000 do
  if redis.call('EXISTS', unpack(states, i, math.min(i + 999, #states))) > 0 then any_state = true end
end
for k = 1, #KEYS - 3 do
  local r, prefix = recs[k], pre[k]
  if r and ARGV[5 * k] ~= '' then
    local jobs = cmsgpack.unpack(ARGV[5 * k])
    pushes[k] = jobs
    for _, j in ipairs(jobs) do
      redis.call('EXISTS', prefix .. ':job:' .. ARGV[5 * k - 3] .. '~' .. j[1], prefix .. ':ready:' .. j[2])
    end
    redis.call('EXISTS', prefix .. ':delayed', prefix .. ':counts')
    clock()
  end
  if r and ARGV[5 * k + 1] ~= '' then
    redis.call('EXISTS', prefix .. ':answer:' .. ARGV[5 * k - 3], prefix .. ':success_hooks')
    clock()
  end
  if any_state and r and r.f and redis.call('EXISTS', prefix .. ':fs:' .. r.t .. ':' .. r.f) == 1 then
    stateful[k] = true
    flow().flow_read(prefix, r.t, r.f)
    clock()
  end
end
-- removed: per partition, the ids leaving its reserved set, in one ZREM (each call is much of an ack's
-- cost); ended: per partition, the jobs per topic that left it.
local out, acked, removed, ended, parts = {}, {}, {}, {}, {}
for k = 1, #KEYS - 3 do
  local job, r, prefix = KEYS[3 + k], recs[k], pre[k]
  if acked[job] then
    -- The same job twice in one call: the second finds what it would find alone after the first.
    if acked[job] == 'kept' then out[k] = -1 else out[k] = 0 end
  elseif not r then
    out[k] = 0
  elseif r.s ~= 'reserved' or r.rc ~= ARGV[5 * k - 2] then
    out[k] = -1
  else
    if not removed[prefix] then
      removed[prefix], ended[prefix] = {}, {}
      parts[#parts + 1] = prefix
    end
    local gone, e = removed[prefix], ended[prefix]
    gone[#gone + 1] = ARGV[5 * k - 3]
    e[r.t] = (e[r.t] or 0) + 1
    -- A job numbered by the beanstalkd protocol leaves its number's entry (bs_number.lua).
    if r.n then redis.call('HDEL', prefix == pre[1] and KEYS[3] or prefix .. ':bs:ids', r.n) end
    -- A job with a flow key: one reservation fewer counts against its key (flow.lua).
    if stateful[k] then flow().flow_count(prefix, r.t, r.f, -1, now) end
    if ARGV[5 * k + 1] ~= '' then
      -- Its success hook, with the callback's answer (dq-checker sends it, then deletes the answer).
      local id = ARGV[5 * k - 3]
      redis.call('SET', prefix .. ':answer:' .. id, ARGV[5 * k + 1], 'PX', 604800000)
      redis.call('ZADD', prefix .. ':success_hooks', now, '0 ' .. now .. ' ' .. r.t .. ' ' .. id)
    end
    local jobs = pushes[k]
    if jobs then
      -- The jobs it pushes, with the ack (add.lua); the record names its own children (`ch`).
      local id, ch = ARGV[5 * k - 3], r.ch or {}
      for _, j in ipairs(jobs) do
        local suffix, topic = j[1], j[2]
        local child = id .. '~' .. suffix
        local run_at = j[5] or (now + j[4])
        local c = {t = topic, b = j[3], r = run_at, ttr = j[6], m = j[7], c = now, a = 0, g = j[8] or nil,
          bo = j[9] or nil, p = j[10] or nil, ch = j[12] or nil, tc = j[13] or nil}
        if c.g then c.x = run_at + c.g end
        add_job(prefix, prefix .. ':job:' .. child, prefix .. ':ready:' .. topic, prefix .. ':delayed', child, c, now,
          j[11] or nil)
        if not string.find(suffix, '~', 1, true) then ch[#ch + 1] = suffix end
      end
      r.ch = ch
    end
    if retention > 0 then
      r.s = 'done'
      -- The attempt goes after the record, written with its new state (record.lua).
      if ARGV[5 * k - 1] ~= '' then rec_attempt(r, ARGV[5 * k - 1]) end
      -- Only the state changed (the bytes read, with the entry after), unless it pushed; expiring in
      -- the same SET.
      rec_store(job, r, jobs == nil, nil, ARGV[1])
      acked[job] = 'kept'
    else
      redis.call('DEL', job)
      acked[job] = 'gone'
    end
    out[k] = 1
  end
end
for _, prefix in ipairs(parts) do
  local gone, reserved, counts = removed[prefix], prefix .. ':reserved', prefix .. ':counts'
  if prefix == pre[1] then reserved, counts = KEYS[1], KEYS[2] end
  for k = 1, #gone, 1000 do redis.call('ZREM', reserved, unpack(gone, k, math.min(k + 999, #gone))) end
  for topic, n in pairs(ended[prefix]) do
    redis.call('HINCRBY', counts, topic .. ':reserved', n == 1 and '-1' or -n)
  end
end
if pre[1] then add_flush(pre[1], KEYS[2], pre[1] .. ':wake:ready', pre[1] .. ':wake:timer') end
return out
