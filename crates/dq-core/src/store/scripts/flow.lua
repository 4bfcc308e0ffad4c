-- flow.lua: flow keys (docs/architecture.md, "Flow keys"). Not a script of its own: it goes after
-- record.lua in front of the scripts that move a job with a flow key (a record's `f`) into or out of
-- ready, or out of the reserved set (scripts.rs), and defines for them `ready_add` and `flow()`, which
-- makes the functions on flow keys the first time a call needs one.
--
-- A key is fair in one of two ways, by what it has in the partition:
-- * Straight (no state, no queue of its own: a key of a topic without limits, not paused). Its ready
--   jobs go straight into the topic's ready queue, each scored by a virtual start time (start-time fair
--   queuing): the key's previous job's start plus one (ms), but never before the queue's first job, so a
--   key that comes to a busy queue starts at its head and one with a backlog gets one job per round of
--   the busy keys, however many it has. The starts of the keys that have jobs ahead are kept in
--   <prefix>:fv:<topic>; a reserve pops such jobs as any other.
-- * Turns (a key with a state: a topic with limits, or a key paused by its callback). Its ready jobs
--   wait in its own queue, not in the topic's ready queue. The topic's ready queue holds the key's turn
--   instead: one member `~<key>` (ids never start with `~`), scored as the key's first job would be, but
--   never earlier than the time the key last had a turn. reserve.lua pops a turn like a job, takes the
--   key's first job under the key's limits, and puts the turn back at the end of the line (the time now)
--   with the priority of the job taken, without reading the next one: a turn whose key's next job is
--   less urgent goes back at that job's priority when it is popped. So among the keys with ready jobs
--   every key gets one job per round, and a key costs its topic's queue one member.
-- A straight job that reserve.lua pops for a topic with limits, or of a key that has a state, goes into
-- its key's queue (the key takes turns from then on); a key whose queue and state are gone is straight
-- again.
--
-- Keys, all in the partition the topic and key hash to (every job of a key is there):
--   <prefix>:fq:<topic>:<key>   sorted set: the key's ready jobs while it takes turns, scored like a
--                               ready queue (rec_score)
--   <prefix>:fs:<topic>:<key>   hash (only for a topic with limits, or a key paused): n its reserved jobs; b 1 while n is at the topic's
--                               flow.concurrency (its turn is out until a reservation ends); tk, ts its
--                               token bucket (tokens, when counted, ms); u paused until (ms, a 429 or
--                               503 `Retry-After`). Expires FLOW_IDLE_MS after n falls to 0.
--   <prefix>:fv:<topic>         sorted set: straight key -> the virtual start of its last job; a key
--                               leaves once the queue's head has passed it, and the set expires
--                               FLOW_IDLE_MS after its last job was added or reserved. It also tells how
--                               many ready jobs a straight key has (for stats, flow.rs): about one a
--                               round from the queue's head to its last start. A straight job is counted
--                               nowhere else, so reserve.lua writes nothing of its key's to take one.
--   <prefix>:flows:<topic>      sorted set: key -> the jobs in its queue (fq), for the keys that take
--                               turns (the busiest keys, for stats; reserve.lua learns from it whether a
--                               key may have jobs left in its queue); a key leaves at 0
--   <prefix>:fp:<topic>         string: "1" while a key of the topic may be paused here (flow_pause sets
--                               it to outlive the pause's state). With neither it nor `flows`, no key of
--                               the topic takes turns here but for a state a topic with limits keeps
--                               (which reserve.lua reads itself): a move sends every key straight
--                               without asking for each key's queue and state (flow_modes), and a
--                               reserve of a topic without limits takes straight jobs without asking
--                               for their keys' states
-- A key's turn is in its topic's ready queue, or parked in the partition's delay set as
-- `~<topic> <key>` until its next token or the end of its pause (promote.lua puts it back), or nowhere:
-- the key has no ready jobs in its queue, or is held back by its concurrency (flow_count gives the turn
-- back). A turn may outlive its key's queue (its last job cancelled while the key had straight ones):
-- popped, it finds the queue empty and is dropped.
--
-- Every caller defines `publish` (record + flow + publish scripts) and reads the keys it will write
-- before its first write (flow().flow_read), as every script does (architecture.md, "Scripts on a moving slot").
--
-- KEYS[1]: none of its own (the including script's; the keys above are named from the partition's prefix)
-- ARGV[1]: none of its own
-- Returns: nothing (defines local functions: `ready_add`, and `flow()`, which returns the others by name).

-- One priority step of a ready score (rec_score): the score's time part is below it.
local FLOW_STEP = 4398046511104
-- How long a key's state outlives its last reservation (ms): by then its bucket is full again for any
-- rate of 1/s or more with a burst up to 60, and a pause asked for ends later than this is kept longer.
local FLOW_IDLE_MS = 60000

-- The functions that work on flow keys are made when a call first needs one: flow() makes them, once a
-- call, and returns them by name (`flow().flow_read(...)`). A call that meets no flow key makes none:
-- thirteen functions and their upvalues made on every call of every script that includes this file
-- were about 3 µs of a one-job call (scripts/profile-scripts.sh, calls of 1).
local flow_fns
local function flow()
  if flow_fns then return flow_fns end
  -- Reads the keys of topic t's flow key k that a move writes (before the caller's first write).
  local function flow_read(prefix, t, k)
    redis.call('EXISTS', prefix .. ':fq:' .. t .. ':' .. k, prefix .. ':fs:' .. t .. ':' .. k,
      prefix .. ':flows:' .. t, prefix .. ':ready:' .. t, prefix .. ':fv:' .. t, prefix .. ':fp:' .. t)
  end

  -- Parks key k's turn in the delay set until `at` (ms): its next token, or the end of its pause.
  local function flow_park(prefix, t, k, at)
    local bucket = prefix .. ':delayed'
    redis.call('ZREM', prefix .. ':ready:' .. t, '~' .. k)
    local head = redis.call('ZRANGE', bucket, '0', '0', 'WITHSCORES')
    redis.call('ZADD', bucket, at, '~' .. t .. ' ' .. k)
    if head[2] == nil or at < tonumber(head[2]) then
      redis.call(publish, prefix .. ':wake:timer', bucket .. ' ' .. at)
    end
  end

  -- Puts key k's turn in topic t's ready queue at `score`, or moves it earlier (never later), unless it
  -- is parked in the delay set or held back by concurrency; a key paused past `now` has it parked until
  -- the pause ends. A queue that was empty wakes its reservers. `fresh`: the key had no ready job before
  -- this one, so it has no turn parked (a key's turn goes with its last ready job), and none is looked for.
  local function flow_turn(prefix, t, k, score, now, fresh)
    local s = redis.call('HMGET', prefix .. ':fs:' .. t .. ':' .. k, 'b', 'u')
    if s[1] then return end
    if not fresh and redis.call('ZSCORE', prefix .. ':delayed', '~' .. t .. ' ' .. k) then return end
    if s[2] and tonumber(s[2]) > now then
      flow_park(prefix, t, k, tonumber(s[2]))
      return
    end
    local ready = prefix .. ':ready:' .. t
    local was_empty = redis.call('EXISTS', ready) == 0
    redis.call('ZADD', ready, 'LT', score, '~' .. k)
    if was_empty then redis.call(publish, prefix .. ':wake:ready', t) end
  end

  -- How key k of topic t takes its jobs: 0 straight (no queue, no state), 1 by turns without a queue yet
  -- (it has a state; then it has no turn either, and flow_turn gives it one), 2 by turns with a queue (and
  -- a turn in line, parked or held back).
  local function flow_mode(prefix, t, k)
    if redis.call('EXISTS', prefix .. ':fq:' .. t .. ':' .. k) == 1 then return 2 end
    if redis.call('EXISTS', prefix .. ':fs:' .. t .. ':' .. k) == 1 then return 1 end
    return 0
  end

  -- Sets each entry's `mode` (flow_mode) for `keyed`, a list of {k = key, ...} of topic t: 0 for all when
  -- no key of the topic has a queue here and none may be paused (`flows`, `fp`: a key with a state of a
  -- topic with limits goes straight, and reserve.lua moves it into its queue); else one EXISTS over their
  -- queues and states, and each key looked at alone only when one of them has either.
  local function flow_modes(prefix, t, keyed)
    if redis.call('EXISTS', prefix .. ':flows:' .. t, prefix .. ':fp:' .. t) == 0 then
      for _, e in ipairs(keyed) do e.mode = 0 end
      return
    end
    local own, owned = {}, 0
    for _, e in ipairs(keyed) do
      own[#own + 1] = prefix .. ':fq:' .. t .. ':' .. e.k
      own[#own + 1] = prefix .. ':fs:' .. t .. ':' .. e.k
    end
    for i = 1, #own, 2000 do owned = owned + redis.call('EXISTS', unpack(own, i, math.min(i + 1999, #own))) end
    for _, e in ipairs(keyed) do e.mode = owned > 0 and flow_mode(prefix, t, e.k) or 0 end
  end

  -- Adds added[i] ready jobs to the count of key names[i] of topic t (the keys distinct): read in one
  -- ZMSCORE and written in one ZADD.
  local function flow_tally(prefix, t, names, added)
    local flows, set = prefix .. ':flows:' .. t, {}
    for i = 1, #names, 1000 do
      local got = redis.call('ZMSCORE', flows, unpack(names, i, math.min(i + 999, #names)))
      for j = 1, #got do
        local n = added[i + j - 1]
        if n > 0 then
          set[#set + 1] = (tonumber(got[j]) or 0) + n
          set[#set + 1] = names[i + j - 1]
        end
      end
    end
    for j = 1, #set, 2000 do redis.call('ZADD', flows, unpack(set, j, math.min(j + 1999, #set))) end
  end

  -- Jobs of straight keys of topic t are ready: `keyed` is a list of {k = key, adds = {score, id, ...}}
  -- (rec_score, in the order they came), the keys distinct. Each job is scored by its priority and its
  -- virtual start: its key's last start plus one, but not before the time part of the queue's first
  -- score (`now`, when the queue is empty). `add(key, score, id)` takes the ready queue's adds (the
  -- caller's one ZADD for the queue); without it they are added here. Returns whether the queue was empty.
  -- The keys leave `flows`, when there is one (a straight key has no queue, so no count there: an entry
  -- is one an earlier release counted straight jobs in, or one gone stale).
  local function flow_straight(prefix, t, keyed, now, add)
    local ready, fv = prefix .. ':ready:' .. t, prefix .. ':fv:' .. t
    local head = redis.call('ZRANGE', ready, '0', '0', 'WITHSCORES')
    local v = head[2] and tonumber(head[2]) % FLOW_STEP or now
    local names = {}
    for i, e in ipairs(keyed) do names[i] = e.k end
    local starts, scored = {}, {}
    for i = 1, #names, 1000 do
      local got = redis.call('ZMSCORE', fv, unpack(names, i, math.min(i + 999, #names)))
      for j = 1, #got do
        local last, e = tonumber(got[j]), keyed[i + j - 1]
        local a = e.adds
        for x = 1, #a, 2 do
          last = (last and last + 1 > v) and last + 1 or v
          if add then
            add(ready, math.floor(tonumber(a[x]) / FLOW_STEP) * FLOW_STEP + last, a[x + 1])
          else
            scored[#scored + 1] = math.floor(tonumber(a[x]) / FLOW_STEP) * FLOW_STEP + last
            scored[#scored + 1] = a[x + 1]
          end
        end
        starts[#starts + 1] = last
        starts[#starts + 1] = e.k
      end
    end
    for j = 1, #scored, 2000 do redis.call('ZADD', ready, unpack(scored, j, math.min(j + 1999, #scored))) end
    -- A start the head has passed gives the same as none: max(v, last + 1) = v.
    redis.call('ZREMRANGEBYSCORE', fv, '-inf', '(' .. v)
    for j = 1, #starts, 2000 do redis.call('ZADD', fv, unpack(starts, j, math.min(j + 1999, #starts))) end
    redis.call('PEXPIRE', fv, FLOW_IDLE_MS)
    local flows = prefix .. ':flows:' .. t
    if redis.call('EXISTS', flows) == 1 then
      for j = 1, #names, 1000 do redis.call('ZREM', flows, unpack(names, j, math.min(j + 999, #names))) end
    end
    return head[1] == nil
  end

  -- Jobs of topic t are ready, for keys that take turns (flow_mode 1 or 2): `keyed` is a list of
  -- {k = key, adds = {score, id, ...}}, the keys distinct; into each key's queue (one ZADD a key), and
  -- the keys' counts (flow_tally). Sets each entry's `added`, how many of its jobs were new.
  local function flow_enqueue_all(prefix, t, keyed)
    local names, added = {}, {}
    for i, e in ipairs(keyed) do
      local q, n = prefix .. ':fq:' .. t .. ':' .. e.k, 0
      local adds = e.adds
      for j = 1, #adds, 2000 do n = n + redis.call('ZADD', q, unpack(adds, j, math.min(j + 1999, #adds))) end
      e.added, names[i], added[i] = n, e.k, n
    end
    flow_tally(prefix, t, names, added)
  end

  -- Jobs of topic t, flow key k, are ready: `adds` is {score, id, score, id, ...} (rec_score), `first`
  -- the lowest score. A straight key's go to the ready queue (a queue that was empty wakes its
  -- reservers); else into the key's queue, and the key gets its turn, or has it moved earlier when these
  -- jobs are more urgent. `mode`: the key's flow_mode when the caller knows it.
  local function flow_add_all(prefix, t, k, adds, first, now, mode)
    mode = mode or flow_mode(prefix, t, k)
    if mode == 0 then
      if flow_straight(prefix, t, {{k = k, adds = adds}}, now) then redis.call(publish, prefix .. ':wake:ready', t) end
      return
    end
    local e = {k = k, adds = adds}
    flow_enqueue_all(prefix, t, {e})
    if mode == 1 then
      flow_turn(prefix, t, k, first, now, true)
    elseif e.added > 0 then
      redis.call('ZADD', prefix .. ':ready:' .. t, 'XX', 'LT', first, '~' .. k)
    end
  end

  -- Job `id` of topic t, flow key k, is ready at `score` (rec_score).
  local function flow_add(prefix, t, k, id, score, now)
    flow_add_all(prefix, t, k, {score, id}, score, now)
  end

  -- Ready job `id` of key k leaves its key's queue, or the ready queue when it went there straight, other
  -- than by a reserve (cancel, reschedule, beanstalkd's reserve-job); a key left without jobs in its queue
  -- loses its turn. (A straight job is counted nowhere: its key's start in `fv` stays, and stats count it
  -- until the queue's head passes that start.)
  local function flow_remove(prefix, t, k, id)
    if redis.call('ZREM', prefix .. ':fq:' .. t .. ':' .. k, id) == 0 then
      redis.call('ZREM', prefix .. ':ready:' .. t, id)
      return
    end
    local flows = prefix .. ':flows:' .. t
    if tonumber(redis.call('ZINCRBY', flows, -1, k)) <= 0 then
      -- A count that says none is checked against the queue, as reserve.lua does.
      local n = redis.call('ZCARD', prefix .. ':fq:' .. t .. ':' .. k)
      if n > 0 then
        redis.call('ZADD', flows, n, k)
        return
      end
      redis.call('ZREM', flows, k)
      redis.call('ZREM', prefix .. ':ready:' .. t, '~' .. k)
      redis.call('ZREM', prefix .. ':delayed', '~' .. t .. ' ' .. k)
    end
  end

  -- A reservation of key k ended (ack, nack, expiry, release, delete, bury) at `now`: one fewer counts
  -- against its concurrency, and a key held back by it gets its turn again, at the end of the line.
  -- `delta` is -1 for an end, +1 for a reservation made outside reserve.lua (beanstalkd's reserve-job).
  local function flow_count(prefix, t, k, delta, now)
    local st = prefix .. ':fs:' .. t .. ':' .. k
    -- A key of a topic without limits has no state (reserve.lua keeps none): nothing to count down.
    if delta < 0 and redis.call('EXISTS', st) == 0 then return end
    local n = redis.call('HINCRBY', st, 'n', delta)
    if n < 0 then
      redis.call('HSET', st, 'n', 0)
      n = 0
    end
    if delta < 0 and redis.call('HDEL', st, 'b') == 1 then
      local head = redis.call('ZRANGE', prefix .. ':fq:' .. t .. ':' .. k, '0', '0', 'WITHSCORES')
      if head[2] then flow_turn(prefix, t, k, math.floor(tonumber(head[2]) / FLOW_STEP) * FLOW_STEP + now, now) end
    end
    if n > 0 then
      redis.call('PERSIST', st)
    else
      local u = tonumber(redis.call('HGET', st, 'u') or 0)
      redis.call('PEXPIRE', st, math.max(FLOW_IDLE_MS, u - now + 1000))
    end
  end

  -- The callback asked for no deliveries of key k until `at` (ms; a 429 or 503 with `Retry-After`): its
  -- turn is parked until then (or kept later, when a longer pause is on).
  local function flow_pause(prefix, t, k, at, now)
    local st = prefix .. ':fs:' .. t .. ':' .. k
    local u = tonumber(redis.call('HGET', st, 'u') or 0)
    if at <= u then return end
    -- A state without a time to live counts reservations (n > 0) and keeps none until they end.
    local kept = redis.call('PTTL', st) == -1
    local fp, life = prefix .. ':fp:' .. t, math.max(FLOW_IDLE_MS, at - now + 1000)
    local marked = redis.call('PTTL', fp)
    redis.call('HSET', st, 'u', at)
    if not kept then redis.call('PEXPIRE', st, life) end
    -- The topic's mark that a key may be paused here outlives this pause's state (flow_modes).
    if marked >= 0 and marked < life then redis.call('PEXPIRE', fp, life) end
    if marked < 0 then redis.call('SET', fp, 1, 'PX', life) end
    if redis.call('EXISTS', prefix .. ':fq:' .. t .. ':' .. k) == 1 and redis.call('HEXISTS', st, 'b') == 0 then
      flow_park(prefix, t, k, at)
    end
  end

  flow_fns = {flow_read = flow_read, flow_park = flow_park, flow_turn = flow_turn, flow_mode = flow_mode, flow_modes = flow_modes, flow_tally = flow_tally, flow_straight = flow_straight, flow_enqueue_all = flow_enqueue_all, flow_add_all = flow_add_all, flow_add = flow_add, flow_remove = flow_remove, flow_count = flow_count, flow_pause = flow_pause}
  return flow_fns
end

-- Job `id` (record `r`) becomes ready at `score`: through flow_add when it has a flow key, else into its
-- topic's ready queue, whose reservers a first job wakes.
local function ready_add(prefix, r, id, score, now)
  if r.f then return flow().flow_add(prefix, r.t, r.f, id, score, now) end
  local ready = prefix .. ':ready:' .. r.t
  local was_empty = redis.call('EXISTS', ready) == 0
  redis.call('ZADD', ready, score, id)
  if was_empty then redis.call(publish, prefix .. ':wake:ready', r.t) end
end

