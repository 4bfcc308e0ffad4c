-- push.lua: store one or more new jobs, each in its delay set or, when already due, its ready queue.
-- Used by both push and push many: a batch is the same operation repeated, done in one round trip, with
-- the sorted-set adds, counters and wake-ups gathered per delay set and per topic (add.lua).
--
-- One call stores the jobs of the partitions of one node (dq-server sends a group's pushes so): on a
-- single Redis (standalone, Sentinel) of any partitions, on a cluster of those its node serves, since
-- each job's keys are named from its own partition's prefix, its record's key without ':job:<id>'. A
-- cluster's call of several partitions declares only KEYS[1] and KEYS[2] and passes the others in ARGV
-- (add.lua's add_spread), and stores nothing, answering "moved", when one of its partitions is not
-- served by this node or its slot is moving (add_served).
--
-- KEYS[1]: counts hash (<prefix>:counts) of the first job's partition (another's: <prefix>:counts)
-- KEYS[2]: that partition's delay set (<prefix>:delayed; another's: <prefix>:delayed)
-- KEYS[1 + 2*i]: job i's record (<prefix>:job:<id>)   KEYS[2 + 2*i]: job i's ready queue (<prefix>:ready:<topic>)
-- KEYS[2 + 2*n + k]: the deduplication key (<prefix>:dedup:<topic>:<dedup_key>) of the k-th job, in
--          order, that has one
-- ARGV[1]: the first job's partition's ready wake channel    ARGV[2]: its timer wake channel (another
--          partition's are <prefix>:wake:ready and <prefix>:wake:timer)
-- ARGV[3 + 9*(i-1) ...]: job i: id, topic, body, delay_ms ("" when run_at is given), run_at ("" when
--          delay_ms is given), ttr_ms, max_attempts, mode: "0" an id minted by dq for this push, "1" the
--          producer's id, "2" a retry of a write whose outcome is unknown (it may have run), "3" a
--          fan-out's child: stored only with its parent, the job before it with children (see below),
--          when this call stores that parent, "4" and "5" as "0" and "1" with the record packed by the
--          caller (crates/dq-core/src/store/new_record.rs) in three parts, in place of the body, ttr_ms
--          and max_attempts: the script packs the one value that depends on the clock, the due time
--          for a job given by its delay, else the delay (due time - now), and puts it between the
--          second and third; the first part ends with the state, which says delayed for a job due at
--          a time, and the script adds 1 (ready) when that time has come (for a job without a retry
--          age or children, and a delay below 10^12 ms; its options then leave out the backoff list and
--          trace context, which the record holds); then its
--          options, "" for none, else seven fields, each "" when absent, separated by ";": dedup_ms (the
--          deduplication window), max_age_ms (retries end that long after the first due time), backoff
--          list (ms, comma-separated; else the caller's at each nack), priority (none: the default,
--          1024; see rec_score), flow key (flow.lua: a ready job goes straight to the ready queue, or
--          to its key's queue while the key takes turns), children ("<ttl ms> <suffix>,<suffix>,...": a
--          fan-out's parent, stored done and expiring ttl ms after its due time, whose children, with
--          ids "<id>~<suffix>", follow it with mode "3"), and the trace context,
--          as crates/dq-core/src/trace.rs stores it, kept as the record's tc (last, and read to the end of the
--          string: a tracestate may hold ";"); or, for a job whose only option is its trace context,
--          that context alone (its stored form begins with "A", where the seven fields begin with a
--          digit or ";"), for a job whose only option is its flow key, "~<key>", and for one whose only
--          option is its priority, "!<priority>". Options are rare,
--          so most jobs cost Redis one argument for them instead of seven (each argument is a string
--          Redis makes for Lua), and a traced or keyed job's is read without a pattern.
-- Returns: "moved" (see above), or the time of the call on Redis's clock (Unix ms), then per job: 1 for a packed job (mode "4"
--          or "5") stored, at the due time given or now + its delay, ready when that is now or
--          earlier, else delayed, else an array of its status (1 = stored, 0 = conflict: the id
--          is taken, or a fan-out's child whose parent this call did not store, 2 = duplicate: a
--          live job pushed with the same deduplication key inside its window), state, run_at, and the id
--          of that first job for a duplicate ("" otherwise). So most jobs are answered with one
--          integer, which Redis converts for less than four values.
--
-- Deduplication: the key holds the id of the job first pushed with it, for dedup_ms (PX). A push that
-- finds the key naming another job whose record is still there answers with that job and writes
-- nothing. A key whose job is gone (cancelled, or its done record expired) does not count: the push is
-- stored and takes the key over. A key naming this push's own id is this push's own earlier attempt, so
-- it goes on as a retry. The key is set as each job is stored, so two jobs with one key in one call are
-- one job and one duplicate.
--
-- A record is written only where there is none (SET NX): a taken id is a conflict, and nothing else of
-- that job is written. A retry ("2") that finds the id stored with the same topic and body answers as
-- stored, with the stored job's state and due time: that is this push, stored by the attempt whose
-- answer was lost. So however the attempts of one push interleave in Redis, there is one job.
--
-- Due times come from this server's clock (TIME), never from the caller's (invariant 2).

local spread = add_spread()
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- The clock, then one answer per job.
local out = {now}
-- Job i's partition prefix: its record's key without ':job:<id>'. The first job's partition's delay set,
-- counts hash and channels are the ones given (KEYS[1], KEYS[2], ARGV[1], ARGV[2]); another's are named
-- from its prefix.
local function prefix_of(i)
  return string.sub(KEYS[3 + 2 * i], 1, -(#ARGV[3 + 9 * i] + 6))
end
local n = (#ARGV - 2) / 9
local first = n > 0 and prefix_of(0)
if spread then
  local prefixes = {}
  for i = 0, n - 1 do prefixes[prefix_of(i)] = true end
  if not add_served(prefixes) then return 'moved' end
end
-- Each job's options: i -> {dedup_ms, max_age_ms, backoff, priority, flow key, children, trace context}
-- (strings, "" when absent), and its deduplication key; read before the first write, with the jobs
-- those keys already name (a record is a key the script cannot declare; see "Scripts on a moving slot"
-- in architecture.md): dedup key -> {id, s, r}. `traces`: the jobs whose only option is a trace context;
-- `keys`: those whose only option is a flow key; `prios`: those whose only option is a priority.
local opts, traces, keys, prios, dedup_of, holder = {}, {}, {}, {}, {}, {}
local next_dedup = 3 + 2 * n
for i = 0, n - 1 do
  local o = ARGV[11 + 9 * i]
  local b = string.byte(o, 1)
  if b == 65 then
    -- A trace context alone, the most common options: the string is the context.
    traces[i] = o
  elseif b == 33 then
    -- A priority alone: `!<priority>`.
    prios[i] = tonumber(string.sub(o, 2))
  elseif b == 126 then
    -- A flow key alone: `~<key>`.
    local k = string.sub(o, 2)
    keys[i] = k
    local delay, at = ARGV[6 + 9 * i], ARGV[7 + 9 * i]
    if (delay ~= '' and tonumber(delay) <= 0) or (at ~= '' and tonumber(at) <= now) then
      flow().flow_read(prefix_of(i), ARGV[4 + 9 * i], k)
    end
  elseif o ~= '' then
    local f = {string.match(o, '^([^;]*);([^;]*);([^;]*);([^;]*);([^;]*);([^;]*);(.*)$')}
    opts[i] = f
    -- A keyed job due now goes to its key's queue, whose keys are read first; a delayed one waits in
    -- the delay set, and promote.lua reads them when it comes due.
    if f[5] ~= '' then
      local delay, at = ARGV[6 + 9 * i], ARGV[7 + 9 * i]
      if (delay ~= '' and tonumber(delay) <= 0) or (at ~= '' and tonumber(at) <= now) then
        flow().flow_read(prefix_of(i), ARGV[4 + 9 * i], f[5])
      end
    end
    if f[1] ~= '' then
      local dedup, id = KEYS[next_dedup], ARGV[3 + 9 * i]
      next_dedup = next_dedup + 1
      dedup_of[i] = dedup
      if holder[dedup] == nil then
        local first = redis.call('GET', dedup)
        local job = KEYS[3 + 2 * i]
        local r = first and first ~= id and rec_load(string.sub(job, 1, #job - #id) .. first)
        holder[dedup] = r and {first, r.s, r.r} or false
      end
    end
  end
end
-- Whether this call stored the last fan-out parent it met: its children (mode "3") go in with it or not
-- at all.
local parent_stored = false
-- The last due time packed for a packed job, and its bytes.
local packed_at, packed_run_at
for i = 0, n - 1 do
  local job = KEYS[3 + 2 * i]
  local a = 3 + 9 * i
  local id, topic, mode = ARGV[a], ARGV[a + 1], ARGV[a + 7]
  local o = opts[i]
  local dedup = dedup_of[i]
  local earlier = dedup and holder[dedup]
  if earlier and earlier[1] ~= id then
    parent_stored = false
    out[#out + 1] = {2, earlier[2], earlier[3], earlier[1]}
  elseif mode == '3' and not parent_stored then
    out[#out + 1] = {0, '', 0, ''}
  else
    local run_at
    if ARGV[a + 3] ~= '' then run_at = now + tonumber(ARGV[a + 3]) else run_at = tonumber(ARGV[a + 4]) end
    local r, ttl
    local packed = mode == '4' or mode == '5'
    if packed then
      -- Packed by the caller: what depends on the clock goes between its parts. (The jobs of a call
      -- share the clock, so those with one delay share one due time, packed once.)
      local head, clocked = ARGV[a + 2], nil
      if ARGV[a + 3] ~= '' then
        if run_at ~= packed_at then packed_at, packed_run_at = run_at, cmsgpack.pack(run_at) end
        clocked = packed_run_at
      else
        -- created_at as rec_store stores it: the delay before the due time, or in full from 10^12 ms.
        local since = run_at - now
        if since >= 1e12 then since = now end
        clocked = cmsgpack.pack(since)
        if run_at <= now then head = string.sub(head, 1, -2) .. string.char(string.byte(head, -1) + 1) end
      end
      r = {t = topic, r = run_at, f = keys[i], p = prios[i], packed = head .. ARGV[a + 5] .. clocked .. ARGV[a + 6]}
    else
      r = {t = topic, b = ARGV[a + 2], r = run_at, ttr = tonumber(ARGV[a + 5]), m = tonumber(ARGV[a + 6]),
        c = now, a = 0, tc = traces[i], f = keys[i], p = prios[i]}
    end
    if o then
      -- (A packed record holds the rest: its options carry neither a retry age nor children.)
      if o[5] ~= '' then r.f = o[5] end
      if o[4] ~= '' then r.p = tonumber(o[4]) end
      if not packed then
        if o[7] ~= '' then r.tc = o[7] end
        if o[2] ~= '' then
          r.g = tonumber(o[2])
          r.x = run_at + r.g
        end
        if o[3] ~= '' then
          r.bo = {}
          for d in string.gmatch(o[3], '%d+') do r.bo[#r.bo + 1] = tonumber(d) end
        end
        if o[6] ~= '' then
          local life, list = string.match(o[6], '^(%d+) (.*)$')
          ttl, r.ch = tonumber(life), {}
          for suffix in string.gmatch(list, '[^,]+') do r.ch[#r.ch + 1] = suffix end
        end
      end
    end
    local prefix = prefix_of(i)
    local state = add_job(prefix, job, KEYS[4 + 2 * i], prefix == first and KEYS[2] or prefix .. ':delayed', id, r,
      now, ttl)
    if ttl then parent_stored = state ~= nil end
    if state then
      if dedup then
        redis.call('SET', dedup, id, 'PX', o[1])
        holder[dedup] = {id, state, run_at}
      end
      -- A packed job's due time and state follow from the clock the caller is given.
      out[#out + 1] = packed and 1 or {1, state, run_at, ''}
    else
      local stored = mode == '2' and rec_load(job)
      if stored and stored.t == topic and stored.b == ARGV[a + 2] then
        out[#out + 1] = {1, stored.s, stored.r, ''}
      else
        out[#out + 1] = {0, '', 0, ''}
      end
    end
  end
end
add_flush(first, KEYS[1], ARGV[1], ARGV[2])
return out
