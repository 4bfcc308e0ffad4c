#!/usr/bin/env bash
# What one call of each script on a job's life costs Redis by itself, with nothing else on the machine's
# Redis: a private redis-server, and the calls dq makes (push.lua with a delay, the job made due, then
# promote.lua, reserve.lua and ack.lua), sent by redis-cli --pipe with BATCH jobs per call, all in one
# partition. Prints Redis CPU per job (a run without the slowlog), then each script's time per call and
# per job (a run that logs every call). Where scripts/profile-life.sh measures the whole system under
# load, this one separates what a call costs from what a job in it costs.
#
#   scripts/profile-scripts.sh              5,000 jobs, in calls of 1, 10 and 100 jobs
#   scripts/profile-scripts.sh 20000 1 50   20,000 jobs, in calls of 1 and of 50
#   FLOW_KEYS=1000 scripts/profile-scripts.sh   every job with a flow key, of 1,000 distinct keys (each
#                                               key at most one job in a call: a batch divides 1,000)
#   ACK_KEEPS=1 scripts/profile-scripts.sh  acks as dq-consumer sends them: each record kept for an hour
#                                           (jobs.done_retention_ms's default) with an attempt entry added to
#                                           its history; without it, as the beanstalkd protocol's delete
#   HANDOFF=1 scripts/profile-scripts.sh    promote.lua given a waiting worker with a client listening on its
#                                           channel: every job handed off (no reserve.lua), acked with its
#                                           hand-off receipt
#   CALLGRIND=1 scripts/profile-scripts.sh  also counts the instructions each script costs Redis per job
#                                           (valgrind's callgrind; slow, but the same from run to run,
#                                           where the timings above move with the machine's load)
#   AOF=1 scripts/profile-scripts.sh        Redis with an AOF (appendfsync everysec, as operations.md asks
#                                           of production): each write a script makes is also written to
#                                           the AOF, which the figures then include (without it, none)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
n=${1:-5000}; shift || true
aof=(--appendonly no)
[ -n "${AOF:-}" ] && aof=(--appendonly yes --appendfsync everysec)
batches=("${@:-1 10 100}"); batches=(${batches[@]})
work=$(mktemp -d)
port=$(bash scripts/free-port.sh)
redis-server --port "$port" --bind 127.0.0.1 --save "" "${aof[@]}" --dir "$work" --logfile "$work/redis.log" &
rpid=$!
trap 'kill -9 $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
# With CALLGRIND=1, a second redis-server, run by callgrind, takes the same calls a phase (a script) at a
# time, its counters dumped around each phase.
cg_port=""
if [ -n "${CALLGRIND:-}" ]; then
  command -v valgrind >/dev/null || { echo "CALLGRIND=1 needs valgrind (apt-get install valgrind)" >&2; exit 1; }
  cg_port=$(bash scripts/free-port.sh)
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" redis-server --port "$cg_port" --bind 127.0.0.1 \
    --save "" "${aof[@]}" --dir "$work" --logfile "$work/cg-redis.log" 2>/dev/null &
  cg_pid=$!
  trap 'kill -9 $rpid $cg_pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
  until redis-cli -p "$cg_port" ping >/dev/null 2>&1; do sleep 0.1; done
fi
# With HANDOFF=1, the waiting worker's process: a client subscribed to its channel on each Redis.
listeners=()
if [ -n "${HANDOFF:-}" ]; then
  for p in $port $cg_port; do
    redis-cli -p "$p" subscribe 'dq:{0.1}:handoff:c1' >/dev/null &
    listeners+=($!)
  done
  trap 'kill -9 $rpid ${cg_pid:-} ${listeners[*]} 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
  for p in $port $cg_port; do
    until [ "$(redis-cli -p "$p" pubsub numsub 'dq:{0.1}:handoff:c1' | tail -1)" = 1 ]; do sleep 0.1; done
  done
fi
rcli() { redis-cli -p "$port" "$@"; }
# The instructions callgrind counted since its last dump (it dumps again).
instructions() {
  callgrind_control -d "$cg_pid" >/dev/null 2>&1
  awk '/^(summary|totals):/ {print $2; exit}' "$(ls -v "$work"/cg.out.* | tail -1)"
}
cpu() { rcli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f\n", s}'; }

for batch in "${batches[@]}"; do
  # The calls, with their KEYS and ARGV as docs/redis-keys.md gives them.
  python3 - "$port" "$n" "$batch" "$work" "${LUA_DIR:-crates/dq-core/src/store/scripts}" "${FLOW_KEYS:-0}" "$cg_port" "${ACK_KEEPS:-}" "${HANDOFF:-}" <<'PY'
import json, os, subprocess, sys
sys.path.insert(0, "scripts")
from profiling import packed, resp, script_text
port, n, batch, work, lua = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
flow_keys, cg_port, keeps, handing = int(sys.argv[6]), sys.argv[7], sys.argv[8] == "1", sys.argv[9] == "1"
# add.lua goes in front of push.lua and ack.lua where a build has it (then an ack takes five arguments,
# not three).
add = os.path.exists(os.path.join(lua, "add.lua"))
sha = {}
for name in ("push", "promote", "reserve", "ack"):
    text = script_text(lua, name)
    sha[name] = subprocess.check_output(["redis-cli", "-p", port, "script", "load", text]).decode().strip()
    if cg_port:
        subprocess.check_output(["redis-cli", "-p", cg_port, "script", "load", text])
# dq packs a new job's record itself (store/new_record.rs, push.lua's mode "4") where push.lua takes it.
packs = '"4" and "5"' in open(os.path.join(lua, "push.lua")).read()
multi = "ARGV[8]" in open(os.path.join(lua, "promote.lua")).read()
P, body, cmds = "dq:{0.1}", '"' + "x" * 62 + '"', []
# The same calls by phase, for callgrind: every push, then every job made due, then the promotions, the
# reserves and the acks (each reserve takes the next jobs in the ready queue, the ones its batch pushed).
phases = {"push": [], "due": [], "promote": [], "reserve": [], "ack": []}
for b in range(0, n, batch):
    ids = [f"job{i:08d}" for i in range(b, min(n, b + batch))]
    keys, args = [f"{P}:counts", f"{P}:delayed"], ["ch:ready", "ch:timer"]
    for i in ids:
        keys += [f"{P}:job:{i}", f"{P}:ready:t"]
        # With flow keys, the options as dq sends a flow key alone (`~<key>`, push.lua's header); the
        # keys are straight (no limits), one job per key in a call.
        k = int(i[3:]) % flow_keys if flow_keys else None
        options = f"~k{k:07d}" if flow_keys else ""
        if packs:
            front = packed(f"k{k:07d}".encode()) if flow_keys else b""
            args += [i, "t", front + bytes([0x97, 1]), 3600000, "", packed(b"t", body.encode()),
                     packed(30000, 10, 3600000), "4", options]
        else:
            args += [i, "t", body, 3600000, "", 30000, 10, "0", options]
    phases["push"].append(resp("EVALSHA", sha["push"], len(keys), *keys, *args))
    phases["due"] += [resp("ZADD", f"{P}:delayed", 1, i) for i in ids]  # due now
    # With HANDOFF, a worker waits for topic t with a slot for each job (its TTR 30 s), and takes them all.
    worker = ["t", f"{P}:handoff:c1", len(ids), 30000] if handing else []
    # (Where promote.lua may take more partitions, ARGV 7 and 8 say it takes none, before the workers.)
    if worker and multi:
        worker = ["0", ""] + worker
    phases["promote"].append(resp("EVALSHA", sha["promote"], 4, f"{P}:delayed", f"{P}:counts", f"{P}:reserved",
                                  f"{P}:announced", P, len(ids), "ch:ready", "ch:timer", "nonce", "", *worker))
    if not handing:
        phases["reserve"].append(resp("EVALSHA", sha["reserve"], 4, f"{P}:reserved", f"{P}:counts", f"{P}:announced",
                                      f"{P}:ready:t", P, len(ids), "rc", "", "ch:timer", ""))
    # The receipts, <nonce>.<k> in the order the jobs were taken (the ids' order here): reserve.lua's
    # nonce "rc", or promote.lua's "nonce".
    rc = "nonce" if handing else "rc"
    keys = [f"{P}:reserved", f"{P}:counts", f"{P}:bs:ids"] + [f"{P}:job:{i}" for i in ids]
    # No attempt kept (with ACK_KEEPS, an hour's retention and an attempt entry: its number 0, which
    # rec_attempt fills in, the receipt, start and end ms, outcome 0, no error, no answer, the consumer),
    # and (with add.lua) no jobs pushed and no success hook.
    def entry(k):
        return bytes([0x98, 0]) + packed(f"{rc}.{k + 1}".encode()) + bytes([0xcf]) + (1764000000000).to_bytes(8, "big") \
            + bytes([0xcf]) + (1764000000150).to_bytes(8, "big") + bytes([0, 0xc2, 0xc2]) + packed(b"host-1234")
    args = [3600000 if keeps else 0] + [x for k, i in enumerate(ids)
                                        for x in (i, f"{rc}.{k + 1}", entry(k) if keeps else "") + (("", "") if add else ())]
    phases["ack"].append(resp("EVALSHA", sha["ack"], len(keys), *keys, *args))
    for phase in phases.values():
        cmds += phase[-1 if phase is not phases["due"] else -len(ids):]
open(os.path.join(work, "calls.resp"), "wb").write(b"".join(cmds))
for name, calls in phases.items():
    open(os.path.join(work, f"{name}.resp"), "wb").write(b"".join(calls))
json.dump({v: k for k, v in sha.items()}, open(os.path.join(work, "names.json"), "w"))
PY
  rcli flushall >/dev/null
  rcli config resetstat >/dev/null
  c0=$(cpu); rcli --pipe < "$work/calls.resp" >/dev/null; c1=$(cpu)
  rcli info commandstats | tr -d '\r' > "$work/commandstats.txt"
  left=$(rcli dbsize)
  rcli flushall >/dev/null
  rcli config set slowlog-log-slower-than 0 >/dev/null; rcli config set slowlog-max-len 1000000 >/dev/null; rcli slowlog reset >/dev/null
  rcli --pipe < "$work/calls.resp" >/dev/null
  rcli slowlog get 1000000 > "$work/slowlog.txt"
  rcli config set slowlog-log-slower-than 10000 >/dev/null
  echo "== $n jobs${FLOW_KEYS:+ with flow keys (${FLOW_KEYS} keys)} in calls of $batch: $(python3 -c "print(f'{($c1 - $c0) / $n * 1e6:.1f}')" ) us of Redis CPU per job (keys left: $left)"
  python3 - "$n" "$work" <<'PY'
import collections, json, os, sys
n, work = int(sys.argv[1]), sys.argv[2]
names = json.load(open(os.path.join(work, "names.json")))
lines = open(os.path.join(work, "slowlog.txt"), errors="replace").read().split("\n")
tot, cnt = collections.Counter(), collections.Counter()
i = 0
while i < len(lines) - 4:
    if lines[i + 2].isdigit() and lines[i + 3].lower() in ("evalsha", "zadd"):
        k = names.get(lines[i + 4], lines[i + 3].lower())
        tot[k] += int(lines[i + 2]); cnt[k] += 1; i += 5
    else:
        i += 1
for k in ("push", "promote", "reserve", "ack"):
    print(f"   {k + '.lua':12} {cnt[k]:6} calls {tot[k] / max(cnt[k], 1):8.1f} us per call {tot[k] / n:6.1f} us per job")
# The run without the slowlog: the time inside the scripts, and of it the Redis commands they called.
stats = {}
for line in open(os.path.join(work, "commandstats.txt")):
    if line.startswith("cmdstat_"):
        name, rest = line[8:].strip().split(":", 1)
        f = dict(kv.split("=") for kv in rest.split(","))
        stats[name] = (int(f["calls"]), int(f["usec"]))
inside = stats.get("evalsha", (0, 0))[1]
called = {k: v for k, v in stats.items() if k not in ("evalsha", "zadd", "flushall", "config", "info")}
# ZADD is both a call of its own (the due-now step) and one the scripts make: count the scripts' share.
zadd_calls, zadd_usec = stats.get("zadd", (0, 0))
if zadd_calls > n:
    called["zadd"] = (zadd_calls - n, zadd_usec * (zadd_calls - n) / zadd_calls)
cmd_us = sum(u for _, u in called.values())
print(f"   inside the scripts {inside / n:6.1f} us per job: Redis commands {cmd_us / n:6.1f}, Lua itself {(inside - cmd_us) / n:6.1f}")
print("   commands per job: " + ", ".join(f"{k} {c / n:.2f}" for k, (c, u) in sorted(called.items(), key=lambda kv: -kv[1][1])))
PY
  if [ -n "$cg_port" ]; then
    # A round to warm up, then the counted one.
    for round in warm counted; do
      redis-cli -p "$cg_port" flushall >/dev/null
      line="   callgrind, instructions per job:"
      for phase in push due promote $([ -z "${HANDOFF:-}" ] && echo reserve) ack; do
        instructions >/dev/null
        redis-cli -p "$cg_port" --pipe < "$work/$phase.resp" >/dev/null
        [ "$phase" = due ] && { instructions >/dev/null; continue; }
        line="$line $phase.lua $(( $(instructions) / n ))"
      done
    done
    echo "$line (keys left: $(redis-cli -p "$cg_port" dbsize))"
  fi
done
