-- record.lua: the job record's format. Not a script of its own: it is put in front of every script that
-- reads or writes a record (scripts.rs), so the format is defined once. (dq-server packs most new jobs'
-- records itself, as rec_store would: crates/dq-core/src/store/new_record.rs, push.lua's modes "4" and
-- "5"; crates/dq-core/tests/new_record.rs holds the two to the same bytes.)
--
-- A record (<prefix>:job:<id>) is one string: a MessagePack array of its fields in the order
-- s, t, b, r, ttr, m, c, a, d, rc, e, x, g, bo, p, n, k, (18 and 19, unused), ch (the names below), the state
-- stored as a number (1 delayed, 2 ready, 3 reserved, 4 done, 5 dead), plus 8 when a trace context
-- follows the array (see tc below).
-- Absent fields are `false` in the array, and absent fields at its end are left out (and so are zero
-- attempts when nothing follows them). created_at is stored as run_at minus created_at (the delay the
-- job was pushed with, usually a short number) rather than a 6-byte Unix time: with both times in full,
-- a record with a 64-byte body was 97 bytes, one past the allocator's 96-byte size class, and took 16
-- bytes more. A stored value of 10^12 or more is a full created_at (records written before, and jobs
-- due 31 years or more after their creation, which the beanstalkd protocol allows: rec_store writes
-- those so). One string instead
-- of a hash of fields takes less memory (200 bytes instead of 248 for a job with a 64-byte body), and a
-- longer body adds only about its length: a hash leaves its compact encoding once a value passes
-- hash-max-listpack-value (64 bytes by default) and then more than doubles.
--
-- Before the array, a record may hold its job's flow key, f, a MessagePack string (a record's first byte
-- says which: a string's header, or the array's). It is kept out of the array for the reason tc is:
-- as field 18 it made every keyed job's array 18 fields long (a three-byte header and ten `false`s),
-- which rec_topic cannot read, so promote.lua unpacked every keyed job; in front, rec_topic reads it
-- with the topic. Records written before keep it as field 18, and rec_load reads it there.
--
-- After the array, a record may hold its job's trace context, tc, a MessagePack string (when the state
-- says so), and then its history: one MessagePack array per delivery attempt, appended as attempts end
-- (rec_attempt), the newest 20 kept (crates/dq-core/src/attempt.rs packs and reads them). rec_load keeps
-- the history's bytes as `h` without decoding them, and rec_store writes them back. The trace context
-- is kept out of the array so that a traced job's array is as short as an untraced one's: its header
-- stays one byte, and promote.lua reads the topic of a traced job from its first bytes as it does for
-- any other (rec_topic), instead of unpacking it (field 19 of a longer array, where records written
-- before kept it, would make every traced job's array 19 fields long, and what rec_topic cannot tell
-- from the header).
--
-- Records written by dq before it packed them are hashes with the same field names. rec_load still reads
-- them, and the first script that changes such a record writes it back packed.
--
-- In Lua a record is a table with the fields by name: s state (delayed, ready, reserved, done or dead),
-- t topic, b body, r run_at (ms), ttr (ms), m max_attempts (0 = unlimited), c created_at (ms),
-- a attempts, d reservation deadline (ms), rc receipt, e last error. Absent fields are nil; `a` reads
-- as 0. x: the end of the job's retries (Unix ms: its first due time plus the retry age it was pushed
-- with), g: that age (ms; a requeue starts it again), bo: its own backoff list (ms); all three only for
-- jobs pushed with them. p: the job's priority (0 to 2^32-1, lower first; absent: the default, 1024),
-- which its ready queue's score puts before its due time (rec_score, and docs/redis-keys.md); n: the
-- beanstalkd number of a job whose id is not one made from its number (see crates/dq-core/src/
-- beanstalkd.rs), given when the beanstalkd protocol first showed it; k: beanstalkd's counters of the
-- job, {timeouts, releases, buries, kicks, delay}: delay (seconds) once a release or kick
-- changed the due time the job was put with. f: the job's flow key, whose ready jobs wait in a queue of
-- their own (flow.lua). tc: the job's W3C trace context, as crates/dq-core/src/trace.rs stores it (the
-- traceparent packed, then a space and the tracestate when there is one), opaque here. ch: the jobs it
-- started, as their ids' suffixes (a child's id is `<id>~<suffix>`): a fan-out's children, or what its
-- callback's answer or its ack pushed (add.lua). All only for jobs that have them. Two more say how the record is stored, for a
-- write of its state alone (rec_store): `at`, the state's offset (after the flow key in front and the
-- array's header), and `sf`, the 8 added to it.
--
-- KEYS[1]: none of its own (the including script's)   ARGV[1]: none of its own
-- Returns: nothing (defines local functions).

-- A number given to redis.call is turned into text by Redis (sprintf "%.17g") and parsed back by the
-- command: about 0.25 µs an argument, as much as a short command's own work. So the scripts give a
-- number they have as text (an ARGV, a score Redis answered, a literal such as '0' or '1') as that
-- text, and a whole number they computed, on the hot paths, as string.format('%d', n): 1,600
-- instructions fewer than Redis's "%.17g" (tostring and `..` use "%.14g", no cheaper). Text Redis
-- answered or was given is read as a number with arithmetic (`s + 0`, `t[1] * 1000`): tonumber(s)
-- converts twice (it checks, then converts), 900 instructions more. A number packed with cmsgpack stays
-- an integer, where cjson would print it (so hand-offs are MessagePack).
--
-- This preamble runs on every call of the scripts that include it, and each function or table it makes
-- costs instructions on each call, so it makes eight functions and no table.

-- The record at `key`, decoded but not named: its array `v` (the fields by position, as stored: v[1]
-- the state's code, plus 8 with a trace context), and what is around it: the flow key in front (`fk`,
-- nil for none), the trace context after it (`tc`), where what follows the array begins (`off`, -1
-- when nothing does; the history) and the bytes in front of the array (`front`: 0, or the flow key's).
-- Returns nil when there is no record. A read that fails raises the error, so the script stops; with
-- `soft`, it returns nil and the error instead, for a caller that must undo something first
-- (reserve.lua: a record on a slot being moved, see architecture.md). A record written as a hash,
-- before records were packed, is returned as `false, raw` for the caller to read (rec_load).
--
-- A record that cannot be decoded (invariant 9) is moved to the partition's quarantine
-- (<prefix>:quarantine, a hash: field = id, value = "<Unix ms> <score> <source>\n" and the raw bytes),
-- where `source` and `score` say which structure the caller found the id in ("-" when it does not know);
-- then it reads as no record at all, so the calling script, and every later one, carries on as for a job
-- without a record (the id leaves its structure), and nothing stalls behind it.
-- `raw`, when given, is what the caller's own GET of `key` returned (see rec_topic).
local function rec_decode(key, soft, source, score, raw)
  raw = raw or redis.pcall('GET', key)
  if not raw then return nil end
  if type(raw) == 'table' then
    if soft and not string.find(raw.err or '', 'WRONGTYPE', 1, true) then return nil, raw.err end
    return false, raw
  end
  -- unpack_one: the record's array alone (`off`: where what follows it begins; -1 when nothing does),
  -- after the flow key when one comes first (`front`: its bytes).
  local fine, off, v = pcall(cmsgpack.unpack_one, raw)
  local fk, front = nil, 0
  if fine and type(v) == 'string' and off > 0 then
    fk, front = v, off
    fine, off, v = pcall(cmsgpack.unpack_one, raw, off)
  end
  local code = fine and type(v) == 'table' and type(v[1]) == 'number' and v[1]
  local tc
  if code and code > 8 and off > 0 then
    -- A trace context follows the array.
    fine, off, tc = pcall(cmsgpack.unpack_one, raw, off)
    code = fine and type(tc) == 'string' and code - 8
  end
  if not code or code < 1 or code > 5
      or type(v[2]) ~= 'string' or type(v[3]) ~= 'string' or type(v[4]) ~= 'number'
      or type(v[5]) ~= 'number' or type(v[6]) ~= 'number' or type(v[7]) ~= 'number' then
    local base, id = string.match(key, '^(.*):job:(.*)$')
    local t = redis.call('TIME')
    local at = t[1] * 1000 + math.floor(t[2] / 1000)
    local moved = redis.pcall('HSET', base .. ':quarantine', id,
      string.format('%d %s %s\n', at, score or '-', source or '-') .. raw)
    if type(moved) == 'table' then
      if soft then return nil, moved.err end
      error(moved.err)
    end
    redis.call('DEL', key)
    return nil
  end
  return v, raw, fk, tc, off, front
end

-- The record at `key` as a table, or nil when there is none (rec_decode: its errors, `soft` and the
-- quarantine).
local function rec_load(key, soft, source, score, raw)
  local v, fk, tc, off, front
  v, raw, fk, tc, off, front = rec_decode(key, soft, source, score, raw)
  if not v then
    if v == nil then return nil, raw end
    -- A record written as a hash, before records were packed (the pcall caught WRONGTYPE); any other
    -- error, HGETALL raises again.
    local flat = redis.call('HGETALL', key)
    local r = {hash = true}
    for i = 1, #flat, 2 do r[flat[i]] = flat[i + 1] end
    for _, f in ipairs({'r', 'ttr', 'm', 'c', 'a', 'd'}) do r[f] = tonumber(r[f]) end
    r.a = r.a or 0
    return r
  end
  local code, s = v[1] % 8
  if code == 3 then s = 'reserved' elseif code == 2 then s = 'ready' elseif code == 1 then s = 'delayed'
  elseif code == 4 then s = 'done' else s = 'dead' end
  local r, c = v[4], v[7]
  if c < 1e12 then c = r - c end
  -- Only the fields there are set: a table's constructor makes room for every name it lists.
  local rec = {s = s, t = v[2], b = v[3], r = r, ttr = v[5], m = v[6], c = c, a = v[8] or 0, raw = raw,
    at = front + (string.byte(raw, front + 1) == 0xdc and 3 or 1), sf = tc and 8 or 0}
  local n = #v
  -- `x or nil` turns an absent field's `false` into nil. A record written before tc and f left the
  -- array has them as fields 19 and 18.
  if n > 8 then rec.d, rec.rc, rec.e = v[9] or nil, v[10] or nil, v[11] or nil end
  if n > 11 then
    rec.x, rec.g, rec.bo, rec.p, rec.n, rec.k = v[12] or nil, v[13] or nil, v[14] or nil, v[15] or nil,
      v[16] or nil, v[17] or nil
    rec.f, rec.tc, rec.ch = v[18] or nil, v[19] or nil, v[20] or nil
  end
  if fk then rec.f = fk end
  if tc then rec.tc = tc end
  if off > 0 then rec.h = string.sub(raw, off + 1) end
  return rec
end

-- The topic of `raw` (a GET's answer), read from its first bytes without unpacking it, for a caller
-- that needs nothing else of a record whose state alone it rewrites (promote.lua moving due jobs to
-- their ready queues: unpacking is most of what a job costs there), whether a trace context follows
-- the array, the flow key in front of it (nil for none) and the state's offset (rec_store's `at`).
-- Only a packed array of 7 to 14 fields (so without p, n, k or ch: those make it 15 or more) whose state
-- is 1 to 5 (9 to 13 with a trace context) and whose topic is a fixstr or str8, behind a flow key that
-- is one too or behind nothing, is read so. For anything else it returns nil, and the caller uses
-- rec_load, which unpacks (and quarantines what it cannot decode).
local function rec_topic(raw)
  if type(raw) ~= 'string' then return nil end
  -- `at`: where the array's header is (1-based), which is the state's offset (0-based).
  local a, b = string.byte(raw, 1, 2)
  local key, at = nil, 1
  if a and a >= 0xa1 and a <= 0xbf then
    key, at = string.sub(raw, 2, a - 0x9f), a - 0x9e
  elseif a == 0xd9 and b then
    key, at = string.sub(raw, 3, b + 2), b + 3
  end
  local h, c, f, n = string.byte(raw, at, at + 3)
  if not f or h < 0x97 or h > 0x9e or c < 1 or c > 13 or (c > 5 and c < 9) then return nil end
  local from, len = at + 3, f - 0xa0
  if f == 0xd9 then from, len = at + 4, n or -1 elseif f < 0xa0 or f > 0xbf then return nil end
  local topic = string.sub(raw, from, from + len - 1)
  if len < 1 or #topic ~= len then return nil end
  return topic, c > 8, key, at
end

-- The score of a job in its ready queue: its priority `p` (nil: the default, 1024; lower is more urgent)
-- times 2^42, plus `at`, its due time (Unix ms, below 2^42 until the year 2109). So a ready queue is in
-- priority order and, within one priority, in due-time order, and one ZPOPMIN takes the most urgent job.
-- A double holds integers exactly up to 2^53: the due time is exact to the ms for priorities up to 2047;
-- above, due times closer than 2^(floor(log2 p) - 10) ms may come in id order (docs/redis-keys.md).
local function rec_score(p, at) return (p or 1024) * 4398046511104 + at end

-- Writes the array `v` (as stored: rec_fields, or rec_store's) at `key`: the flow key `fk` in front,
-- the trace context `tc` after it (v[1], the state's code, says 8 more when there is one), then the
-- history `h`. With `nx`, only where there is no record (SET NX); returns whether it was written. With
-- `px` (ms, as text), the record expires that long after (a done record; one SET, not SET and PEXPIRE).
local function rec_put(key, v, fk, tc, h, nx, px)
  local packed = tc and cmsgpack.pack(v, tc) or cmsgpack.pack(v)
  if fk then packed = cmsgpack.pack(fk) .. packed end
  if h then packed = packed .. h end
  if nx then return redis.call('SET', key, packed, 'NX') ~= false end
  if px then redis.call('SET', key, packed, 'PX', px) else redis.call('SET', key, packed) end
  return true
end

-- Writes `r` at `key`. The fields up to `a` are always there; the optional ones (d, rc, e, x, g, bo) are
-- `false` when absent, and left out at the end. (So are p, n, k and ch.) The flow key goes in front of
-- the array, the trace context after it, then the history. A reservation's end is `r.rc, r.d = nil, nil`.
--
-- With `only_state`, the caller changed nothing but `r.s`. The state is the array's first element, one
-- byte (a positive fixint), after MessagePack's array header, so one SETRANGE writes it without
-- rewriting the record: at r.at, the flow key's bytes in front and the header's length as stored (one
-- byte, a fixarray, up to 15 fields; a record with n, k or ch has 16 to 20, and a three-byte header, an
-- array16), with r.sf added (8 when a trace context follows). (A done record, written so, keeps the receipt and deadline of its last
-- reservation, which mean nothing once it is done.)
--
-- Only done records have a TTL (ack gives it after this), and no script rewrites a done record, so a SET
-- never drops a TTL that should stay.
--
-- A priority of 1024, the default, is stored as none.
--
-- With `new`, the record is written only if there is none at `key` (SET NX); returns whether it was.
-- With `px` (ms, as text), it expires that long after (ack.lua's done records), in the same SET.
local function rec_store(key, r, only_state, new, px)
  local s, code = r.s
  if s == 'delayed' then code = 1 elseif s == 'ready' then code = 2 elseif s == 'reserved' then code = 3
  elseif s == 'done' then code = 4 elseif s == 'dead' then code = 5
  else error('unknown job state ' .. tostring(s)) end
  if only_state and not r.hash and not r.whole then
    local at = r.at
    code = code + r.sf
    if (r.added or px) and r.raw then
      -- An attempt to add too (rec_attempt), or an expiry: one SET of the bytes read, the state byte
      -- changed and the entry after them, not packed again. (An APPEND, or a SETRANGE past the end, would
      -- leave the string as much room again unused: Redis grows a string greedily, and a SET allocates
      -- what it holds.)
      local bytes = string.sub(r.raw, 1, at) .. string.char(code) .. string.sub(r.raw, at + 2) .. (r.added or '')
      if px then redis.call('SET', key, bytes, 'PX', px) else redis.call('SET', key, bytes) end
    else
      redis.call('SETRANGE', key, at == 1 and '1' or at, string.char(code))
    end
    return
  end
  -- A delay of 10^12 ms or more (beanstalkd's allow up to 136 years) would read as a full created_at:
  -- such a record keeps the full one.
  local since = r.r - r.c
  if since >= 1e12 then since = r.c end
  local tc = r.tc
  if tc then code = code + 8 end
  local v
  if r.a == 0 and not (r.d or r.rc or r.e or r.x or r.g or r.bo or (r.p and r.p ~= 1024) or r.n or r.k or r.ch) then
    -- A job with none of the fields after the seventh (a new one, most often): its array is those seven.
    v = {code, r.t, r.b, r.r, r.ttr, r.m, since}
  else
    v = {code, r.t, r.b, r.r, r.ttr, r.m, since, r.a, r.d or false, r.rc or false, r.e or false,
      r.x or false, r.g or false, r.bo or false, (r.p ~= 1024 and r.p) or false, r.n or false, r.k or false,
      false, false, r.ch or false}
    local n = 20
    while n > 8 and v[n] == false do
      v[n] = nil
      n = n - 1
    end
    if n == 8 and r.a == 0 then v[8] = nil end
  end
  -- (A new job has no history.)
  return rec_put(key, v, r.f, tc, not new and r.h or nil, new, px)
end

-- The record at `key` as rec_decode reads it, for a move that reads and writes few of its fields by
-- position (reserve.lua): no table by name is made, and rec_put writes it back. Returns the array `v`,
-- the flow key in front (nil for none), the trace context (nil for none) and the bytes after (the
-- history, nil for none); or nil (no record, and the error with `soft`, as rec_decode). A record in an
-- older format (a hash, or the flow key or trace context as fields 18 and 19) is first written again
-- in this one (rec_store): it says the same, so a call that fails after it changed nothing.
local function rec_fields(key, soft, source, score)
  local v, raw, fk, tc, off = rec_decode(key, soft, source, score)
  if v == false or (v and (v[18] or v[19])) then
    rec_store(key, rec_load(key, soft, source, score, type(raw) == 'string' and raw or nil))
    v, raw, fk, tc, off = rec_decode(key, soft, source, score)
  end
  if not v then return nil, raw end
  return v, fk, tc, off > 0 and string.sub(raw, off + 1) or nil
end

-- Adds attempt `e` to r's history (r.h): `e` is an array of 8 whose first element, the attempt number,
-- is a one-byte 0 (crates/dq-core/src/attempt.rs), and r.a fills it in. A job past 20 attempts drops its
-- oldest (the only time a history is decoded: then `r.whole`, the record is written whole). rec_store
-- writes it: whole, or with `only_state` the bytes read with the new state and the entry (`r.added`).
local function rec_attempt(r, e)
  e = '\152' .. cmsgpack.pack(r.a) .. string.sub(e, 3)
  local h = r.h
  if h and r.a > 20 then
    local all = {cmsgpack.unpack(h)}
    if #all >= 20 then h, r.whole = cmsgpack.pack(unpack(all, #all - 18)), true end
  end
  r.h, r.added = (h or '') .. e, e
end
