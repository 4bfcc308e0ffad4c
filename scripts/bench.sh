#!/usr/bin/env bash
# Measures dq on this machine in one run: a private redis-server, dq-server, two dq-timers and a
# dq-consumer (release build), then every figure the issues ask for. Redis, dq and the load share the machine, so the push
# figure is also given as a ratio to redis-benchmark running the same push script on the same Redis.
#
#   scripts/bench.sh            all figures
#   BENCH_ONLY="push batch" scripts/bench.sh   some of: push auth priority batch reserve memory lateness cpu cpu-deliver burst kill deliver
#                                      coalesce flow flow-cost (flow: all its figures; flow-cost: what keys cost only,
#                                      with LIFE_SCRIPTS=1 each script's share) history (attempt history: see its comment)
#                                      trace (pushes with a traceparent and without)
#                                      waiters schedules life (LIFE_PATH=push|pull|beanstalkd|bullmq: scripts/profile-life.sh)
#   DQ_BIN=/path/to/other/build scripts/bench.sh   the binaries of another build, for a before/after run
#   (DQ_SHARDS_LAYOUT=1 for a build from before partitions, which reads redis.shards)
#   DQ_REDIS_MODE=cluster scripts/bench.sh   the same on a local Redis Cluster of 3 primaries
#   BENCH_PIN=1 scripts/bench.sh   Redis on CPU 0, dq and the load on the others (taskset), so that
#                                  Redis's CPU per job is not inflated by sharing its core
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
[ -n "${DQ_BIN:-}" ] || cargo build --release --bins --locked >&2
bin=${DQ_BIN:-target/release}

work=$(mktemp -d)
pin_redis=(); pin_rest=()
if [ -n "${BENCH_PIN:-}" ]; then pin_redis=(taskset -c 0); pin_rest=(taskset -c "1-$(($(nproc) - 1))"); fi
port() { bash scripts/free-port.sh; }
rport=$(port); sport=$(port)
pids=()
# Reaped quietly: bash would otherwise report each process it killed as "Killed".
cleanup() { { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait; } 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# The Redis nodes: one standalone Redis, or with DQ_REDIS_MODE=cluster a local Redis Cluster of 3
# primaries (no replicas) whose figures (memory, commands, CPU) are summed over the nodes.
nodes=()
cluster=""
[ "${DQ_REDIS_MODE:-standalone}" = cluster ] && cluster=1
# Waits until a node answers (`up <port>`) or the cluster is formed (`formed <port>`), 30 s at most; a
# node that did not start (its port taken meanwhile) ends the run with the nodes' logs, not a hang.
up() { redis-cli -p "$1" ping >/dev/null 2>&1; }
formed() { redis-cli -p "$1" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; }
wait_until() {
  local end=$((SECONDS + 30))
  until "$@"; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "bench: no answer from Redis ($*) in 30 s; its logs:" >&2
      tail -n 20 "$work"/*/redis.log >&2
      exit 1
    fi
    sleep 0.05
  done
}
for _ in $( [ -n "$cluster" ] && echo 1 2 3 || echo 1 ); do
  p=$(port); nodes+=("$p"); mkdir -p "$work/$p"
  "${pin_redis[@]}" redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/$p" --logfile "$work/$p/redis.log" \
    ${cluster:+--cluster-enabled yes --cluster-config-file "$work/$p/nodes.conf" --cluster-node-timeout 1000} &
  pids+=($!)
  wait_until up "$p"
done
rport=${nodes[0]}
if [ -n "$cluster" ]; then
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${nodes[@]}") --cluster-replicas 0 --cluster-yes >/dev/null
  for p in "${nodes[@]}"; do
    wait_until formed "$p"
  done
  export DQ__REDIS__MODE=cluster DQ__REDIS__URLS=$(printf 'redis://127.0.0.1:%s,' "${nodes[@]}" | sed 's/,$//')
elif [ -n "${DQ_SHARDS_LAYOUT:-}" ]; then export DQ__REDIS__SHARDS="redis://127.0.0.1:$rport"; else export DQ__REDIS__URLS="redis://127.0.0.1:$rport"; fi
bsport=$(port)
export DQ__SERVER__LISTEN="127.0.0.1:$sport" DQ__BEANSTALKD__LISTEN="127.0.0.1:$bsport" DQ__LOG__LEVEL=warn
"${pin_rest[@]}" $bin/dq-server >"$work/server.log" 2>&1 &
pids+=($!)
timer_pids=(); timer_ports=()
for i in 1 2; do
  tp=$(port); timer_ports+=("$tp")
  DQ__METRICS__LISTEN="127.0.0.1:$tp" "${pin_rest[@]}" $bin/dq-timer >"$work/timer$i.log" 2>&1 &
  pids+=($!); timer_pids+=($!)
done
# A counter of the timers' /metrics, summed over them (0 when a build does not have it).
timer_metric() {
  for p in "${timer_ports[@]}"; do curl -s "http://127.0.0.1:$p/metrics" || true; done |
    awk -v m="$1" '$1==m {s += $2} END {printf "%d\n", s}'
}
DQ__METRICS__LISTEN="127.0.0.1:$(port)" "${pin_rest[@]}" $bin/dq-consumer >"$work/consumer.log" 2>&1 &
pids+=($!)
until (exec 3<>"/dev/tcp/127.0.0.1/$sport") 2>/dev/null; do sleep 0.05; done
bench() { "${pin_rest[@]}" $bin/dq-bench --url "http://127.0.0.1:$sport" "$@"; }
rcli() { for p in "${nodes[@]}"; do redis-cli -p "$p" "$@"; done; }
# A field of INFO, summed over the nodes.
info() { rcli info "$1" | tr -d '\r' | awk -F: -v k="$2" '$1==k {s += $2} END {printf "%.6f\n", s}'; }
want() { [ -z "${BENCH_ONLY:-}" ] || [[ " $BENCH_ONLY " == *" $1 "* ]]; }
# redis-benchmark on the private Redis, quiet; prints its requests per second.
rbench() {
  redis-benchmark -p "$rport" -q "$@" | tr '\r' '\n' | grep -ao '[0-9.]* requests per second' | tail -1 | awk '{print $1}'
}
# Of 100,000 single pushes (after a warm-up that loads the script and creates the counts hash): Redis
# memory per job in bytes, and Redis commands per push (EVALSHA and the script's inner calls). Memory is
# read 3 s after the pushes, once Redis has shrunk idle clients' input buffers (a grouped push call of
# up to 1000 jobs is up to about 200 KB of input). Without the wait, runs gave 347 to 349 bytes.
per_job() {
  rcli flushall >/dev/null
  bench push -n 1000 -c 8 --warmup 0 --topic warm >/dev/null
  sleep 3
  local m0 c0 c1; m0=$(info memory used_memory); c0=$(info stats total_commands_processed)
  bench push -n 100000 -c 64 --warmup 0 "$@" >/dev/null
  c1=$(info stats total_commands_processed)
  sleep 3
  python3 -c "print(f'{($(info memory used_memory)-$m0)/100000:.0f} {($c1-$c0)/100000:.2f}')"
}
# Redis's time per script, from a slowlog that logged every call (slowlog-log-slower-than 0): calls,
# time in all and per call, each script named by its file (matched by the SHA1 dq-server loads it under).
script_times() {
  rcli slowlog get 1000000 > "$work/slowlog.txt"
  python3 - "$work/slowlog.txt" "${1:-0}" crates/dq-core/src/store/scripts <<'PY'
import hashlib, os, re, sys, collections
jobs, lua = int(sys.argv[2]), sys.argv[3]
rec = open(os.path.join(lua, "record.lua")).read()
flow = open(os.path.join(lua, "flow.lua")).read() if os.path.exists(os.path.join(lua, "flow.lua")) else ""
add = open(os.path.join(lua, "add.lua")).read() if os.path.exists(os.path.join(lua, "add.lua")) else ""
# promote.lua's own parts in front of it, where there are some.
handoff = "".join(open(os.path.join(lua, f)).read() for f in ("promote_plain.lua", "handoff.lua")
                  if os.path.exists(os.path.join(lua, f)))
names = {}
# A grouped build (where there is one: grouped.lua) wraps a body as one(KEYS, ARGV) and loops over parts.
loop = open(os.path.join(lua, "grouped.lua")).read() if os.path.exists(os.path.join(lua, "grouped.lua")) else None
for f in os.listdir(lua):
    body = open(os.path.join(lua, f)).read()
    for pub in ("", "local publish = 'PUBLISH'\n", "local publish = 'SPUBLISH'\n"):
        for text in (pub + body, rec + pub + body, rec + pub + flow + body, rec + pub + flow + add + body,
                     rec + pub + flow + handoff + body):
            names[hashlib.sha1(text.encode()).hexdigest()] = f
        if loop:
            text = rec + pub + "local function one(KEYS, ARGV)\n" + body + "\nend\n" + loop
            names[hashlib.sha1(text.encode()).hexdigest()] = f + " (grouped)"
lines = open(sys.argv[1], errors="replace").read().split("\n")
# redis-cli prints each entry as: id, time, duration, then the command's words, then client, name.
tot, cnt = collections.Counter(), collections.Counter()
i = 0
while i < len(lines) - 3:
    if lines[i + 3].lower() == "evalsha" and i + 4 < len(lines):
        try:
            d = int(lines[i + 2])
        except ValueError:
            i += 1; continue
        n = names.get(lines[i + 4], lines[i + 4][:8])
        # promote.lua given waiting workers (after ARGV 8 and the m more partitions' prefixes that ARGV 7
        # counts, where a call without them has its client's address) takes its general path, with the
        # hand-offs; told apart, for the hand-offs' share.
        if n == "promote.lua" and i + 18 < len(lines) and lines[i + 16].isdigit():
            w = i + 18 + int(lines[i + 16])
            if w < len(lines) and not re.match(r"^[\d.]+:\d+$", lines[w]):
                n = "promote.lua (workers)"
        tot[n] += d; cnt[n] += 1
        i += 5
    else:
        i += 1
for n, t in tot.most_common(12):
    per_job = f" {t / jobs:7.1f} us per job" if jobs else ""
    print(f"   {n:24} {cnt[n]:8d} calls {t:10d} us {t / cnt[n]:8.1f} us/call{per_job}")
PY
}
echo "redis $(redis-server --version | awk '{print $3}'), $(nproc) cores; ${cluster:+a Redis Cluster of 3 primaries, }Redis, dq-server, 2 dq-timers, dq-consumer and the load on this one machine"

if want push && [ -n "$cluster" ]; then
  echo; echo "== single pushes, 64-byte body, 64 connections (cluster: no redis-benchmark ratio)"
  bench push -n 200000 -c 64 | head -1
  rcli flushall >/dev/null
elif want push; then
  echo; echo "== single pushes, 64-byte body, 64 connections: dq over HTTP vs redis-benchmark on push.lua's EVALSHA,"
  echo "   three pairs taken in turn and their median ratio (one pair swings with the noise of a shared machine);"
  echo "   and vs the bare axum + redis-rs push path (dq-bench baseline) loaded the same way"
  # push.lua as dq-server loads it on a standalone Redis: after record.lua, the record's format, the line
  # that names the publish command, flow.lua and add.lua (crates/dq-core/src/store/scripts/mod.rs).
  lua=crates/dq-core/src/store/scripts
  sha=$(rcli script load "$(cat $lua/record.lua; echo "local publish = 'PUBLISH'"; cat $lua/flow.lua $lua/add.lua $lua/push.lua)")
  body='"'$(printf 'x%.0s' $(seq 62))'"'
  pairs=()
  for _ in 1 2 3; do
    # Its keys and arguments as docs/redis-keys.md gives them: counts, delay set, then per job its record
    # and ready queue; the channels, then per job id, topic, the record's three parts as dq-server packs
    # them (mode "4", crates/dq-core/src/store/new_record.rs: array header and state; topic and body; ttr
    # 30000, max attempts 10 and the delay), delay_ms, run_at and options. The delay is 16,843,009 ms
    # (4.7 hours), whose four bytes hold no zero, which an argument cannot carry; packed as long as
    # dq-bench's hour.
    rb=$(rbench -c 64 -n 200000 -r 1000000000 EVALSHA "$sha" 4 dq:counts dq:delayed:3 dq:job:rb__rand_int__ \
          dq:ready:rb dq:wake:ready dq:wake:timer rb__rand_int__ rb $'\x97\x01' 16843009 "" \
          $'\xa2rb\xd9\x40'"$body" $'\xcdu0\x0a\xce\x01\x01\x01\x01' 4 "")
    rcli flushall >/dev/null
    dq=$(bench --json push -n 200000 -c 64 | tail -1)
    echo "$dq"
    rcli flushall >/dev/null
    pairs+=("$rb $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["jobs_per_sec"])' "$dq")")
  done
  bport=$(port)
  $bin/dq-bench baseline --redis "redis://127.0.0.1:$rport" --listen "127.0.0.1:$bport" >"$work/baseline.log" 2>&1 &
  bpid=$!; pids+=($bpid)
  until (exec 3<>"/dev/tcp/127.0.0.1/$bport") 2>/dev/null; do sleep 0.05; done
  base=$($bin/dq-bench --url "http://127.0.0.1:$bport" --json push -n 200000 -c 64 | tail -1)
  kill "$bpid"; wait "$bpid" 2>/dev/null || true
  python3 - "$base" "${pairs[@]}" <<'PY'
import json, statistics, sys
base = json.loads(sys.argv[1])["jobs_per_sec"]
pairs = [tuple(map(float, p.split())) for p in sys.argv[2:]]
for rb, dq in pairs:
    print(f"redis-benchmark EVALSHA push.lua: {rb:,.0f}/s   dq push over HTTP: {dq:,.0f}/s   ratio {dq/rb:.2f}")
print(f"median ratio {statistics.median(dq / rb for rb, dq in pairs):.2f}")
dq = pairs[-1][1]
print(f"bare axum + redis-rs push path:   {base:,.0f}/s   dq (last pair) / bare: {dq/base:.2f}")
PY
  rcli flushall >/dev/null
fi

if want auth; then
  echo; echo "== single pushes with tokens vs an open API: a second dq-server with an admin token on the same Redis,"
  echo "   the two loaded in turn, three times (64 connections, 100,000 pushes each)"
  aport=$(port)
  DQ__SERVER__LISTEN="127.0.0.1:$aport" DQ__AUTH__ADMIN_TOKEN=bench-admin-token $bin/dq-server >"$work/server-auth.log" 2>&1 &
  apid=$!; pids+=($apid)
  until (exec 3<>"/dev/tcp/127.0.0.1/$aport") 2>/dev/null; do sleep 0.05; done
  ratios=()
  for _ in 1 2 3; do
    open=$(bench --json push -n 100000 -c 64 | tail -1)
    rcli flushall >/dev/null
    auth=$($bin/dq-bench --url "http://127.0.0.1:$aport" --token bench-admin-token --json push -n 100000 -c 64 | tail -1)
    rcli flushall >/dev/null
    ratios+=("$(python3 -c "import json,sys; o=json.loads(sys.argv[1])['jobs_per_sec']; a=json.loads(sys.argv[2])['jobs_per_sec']; print(f'{o:.0f} {a:.0f} {a/o:.3f}')" "$open" "$auth")")
  done
  kill "$apid"; wait "$apid" 2>/dev/null || true
  printf '%s\n' "${ratios[@]}" | awk '{printf "open %s/s   with tokens %s/s   ratio %s\n", $1, $2, $3}'
fi

if want priority; then
  echo; echo "== single pushes with a priority (7) and without, loaded in turn, three times (64 connections,"
  echo "   100,000 pushes each; delayed, then due at once, so the ready queue's score is written too),"
  echo "   with Redis's CPU per push"
  cpu_now() { python3 -c "print($(rcli info cpu | awk -F: '/^used_cpu_(user|sys):/ {s+=$2} END {print s}'))"; }
  for delay in 3600000 0; do
    rows=()
    for _ in 1 2 3; do
      for prio in "" 7; do
        c0=$(cpu_now)
        out=$(bench --json push -n 100000 -c 64 --delay-ms "$delay" ${prio:+--priority "$prio"} | tail -1)
        c1=$(cpu_now)
        rcli flushall >/dev/null
        rows+=("${prio:-none} $(python3 -c "import json,sys; print(json.loads(sys.argv[1])['jobs_per_sec'])" "$out") $c0 $c1")
      done
    done
    python3 - "$delay" "${rows[@]}" <<'PY'
import statistics, sys
delay, rows = sys.argv[1], [r.split() for r in sys.argv[2:]]
by = {"none": [], "7": []}
for prio, rate, c0, c1 in rows:
    by[prio].append((float(rate), (float(c1) - float(c0)) / 100000 * 1e6))
for prio, runs in by.items():
    print(f"delay_ms {delay}, priority {prio:>4}: " + "  ".join(f"{r:,.0f}/s {c:.1f} µs" for r, c in runs))
ratios = [p[0] / n[0] for n, p in zip(by["none"], by["7"])]
print(f"delay_ms {delay}: with / without, throughput median {statistics.median(ratios):.3f}, Redis CPU per push median "
      f"{statistics.median(p[1] / n[1] for n, p in zip(by['none'], by['7'])):.3f}")
PY
  done
fi

if want trace; then
  # No telemetry.otlp_endpoint: the cost of carrying a job's trace context (checked at push, one more
  # options argument, the packed context after the record's array), not of exporting spans.
  tp="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
  echo; echo "== single pushes with a traceparent field and without, loaded in turn, six times, which goes"
  echo "   first alternating (64 connections, 100,000 pushes each; delayed, then due at once), with Redis's"
  echo "   CPU per push; then Redis memory per delayed job and commands per push"
  cpu_now() { python3 -c "print($(rcli info cpu | awk -F: '/^used_cpu_(user|sys):/ {s+=$2} END {print s}'))"; }
  for delay in 3600000 0; do
    rows=()
    for round in 1 2 3 4 5 6; do
      order=("" "$tp")
      if (( round % 2 == 0 )); then order=("$tp" ""); fi
      for trace in "${order[@]}"; do
        c0=$(cpu_now)
        out=$(bench --json push -n 100000 -c 64 --delay-ms "$delay" ${trace:+--traceparent "$trace"} | tail -1)
        c1=$(cpu_now)
        rcli flushall >/dev/null
        rows+=("${trace:+traced}${trace:-none} $(python3 -c "import json,sys; print(json.loads(sys.argv[1])['jobs_per_sec'])" "$out") $c0 $c1")
      done
    done
    python3 - "$delay" "${rows[@]}" <<'PY'
import statistics, sys
delay, rows = sys.argv[1], [r.split() for r in sys.argv[2:]]
by = {"none": [], "traced": []}
for kind, rate, c0, c1 in rows:
    by["traced" if kind.startswith("traced") else "none"].append((float(rate), (float(c1) - float(c0)) / 100000 * 1e6))
for kind, runs in by.items():
    print(f"delay_ms {delay}, {kind:>6}: " + "  ".join(f"{r:,.0f}/s {c:.1f} µs" for r, c in runs))
ratios = [t[0] / n[0] for n, t in zip(by["none"], by["traced"])]
print(f"delay_ms {delay}: traced / not, throughput median {statistics.median(ratios):.3f}, Redis CPU per push median "
      f"{statistics.median(t[1] / n[1] for n, t in zip(by['none'], by['traced'])):.3f}")
PY
  done
  read -r m0 k0 <<<"$(per_job)"
  read -r m1 k1 <<<"$(per_job --traceparent "$tp")"
  echo "memory per delayed job: $m0 bytes without, $m1 with a traceparent; commands per push: $k0 without, $k1 with"
  rcli flushall >/dev/null
fi

if want coalesce; then
  echo; echo "== coalescing end to end (dq-server, dq-timer, dq-consumer; an in-process callback):"
  echo "   last: 1,000 pushes to one key over 10 s, window 500 ms: one delivery, the last body, how long after the last push"
  bench coalesce --mode last -n 1000 --over-ms 10000 --window-ms 500 | grep -v '^  p[0-9]'
  echo "   merge: 10,000 pushes over 100 keys from 16 connections, window 1 s: every item in exactly one delivered job"
  bench coalesce --mode merge -n 10000 --keys 100 --window-ms 1000 -c 16 | grep -v '^  p[0-9]'
  rcli flushall >/dev/null
fi

if want flow || want flow-cost; then
  echo; echo "== flow keys end to end (dq-server, dq-timer, dq-consumer; an in-process callback that answers at once)"
  if want flow; then
    echo "   fairness: 50,000 ready jobs of one key, then 5 jobs of each of 200 keys, callback concurrency 32: how long"
    echo "   each small job waited (arrival - push answer), and the big key's jobs still to come after the last small one;"
    echo "   then the same jobs without flow keys"
    for keyless in "" --keyless; do
      run=$(bench --json flow --mode fair --big 50000 --small-keys 200 --small-jobs 5 --concurrency 32 $keyless | tail -1)
      python3 - "$run" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
what = "without keys" if r["keyless"] else "flow keys   "
print(f"   {what}: small jobs waited p50 {r['small_wait_p50_ms']:.0f} ms, p99 {r['small_wait_p99_ms']:.0f} ms, "
        f"max {r['small_wait_max_ms']:.0f} ms; {r['big_jobs_after_the_last_small']} of the big key after the last small; "
        f"{r['missing']} missing")
PY
      rcli flushall >/dev/null
    done
    echo "   per-key rate: 3 dq-consumers, 20 keys of 100 jobs at flow.rate_per_s 10, burst 10"
    extra=()
    for _ in 1 2; do
      DQ__METRICS__LISTEN="127.0.0.1:$(port)" "${pin_rest[@]}" $bin/dq-consumer >>"$work/consumer-extra.log" 2>&1 &
      pids+=($!); extra+=($!)
    done
    sleep 2
    run=$(bench --json flow --mode rate --keys 20 --jobs-per-key 100 --rate 10 --burst 10 --concurrency 64 | tail -1)
    python3 - "$run" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"   each key: {r['key_rate_min']:.2f} to {r['key_rate_max']:.2f} jobs/s (mean {r['key_rate_mean']:.2f}; worst "
        f"{r['key_rate_worst_deviation'] * 100:.1f}% off {r['rate_per_s']:g}/s); most arrivals of a key beyond rate x stretch "
        f"+ burst: {r['most_arrivals_beyond_the_bound']:.2f}; {r['missing']} missing")
PY
    for p in "${extra[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    rcli flushall >/dev/null
  fi
  echo "   cost: 50,000 jobs due at once (pushed 8 s ahead), callback concurrency 64, with 10,000 distinct flow keys and"
  echo "   without; delivery throughput and Redis CPU per job over its life (push, promote, reserve, deliver, ack);"
  echo "   alternating runs"
  cpu() { python3 -c "print($(info cpu used_cpu_user) + $(info cpu used_cpu_sys))"; }
  # FLOW_COST_ROUNDS: more pairs for a steadier median (each pair about a minute).
  for round in $(seq 1 "${FLOW_COST_ROUNDS:-2}"); do
    for keys in 0 10000; do
      rcli flushall >/dev/null
      [ -n "${LIFE_SCRIPTS:-}" ] && rcli config set slowlog-log-slower-than 0 >/dev/null && \
        rcli config set slowlog-max-len 1000000 >/dev/null && rcli slowlog reset >/dev/null
      c1=$(cpu)
      run=$(bench --json flow --mode cost -n 50000 --keys "$keys" --lead-ms 8000 --concurrency 64 | tail -1)
      c2=$(cpu)
      [ -n "${LIFE_SCRIPTS:-}" ] && script_times 50000 && rcli config set slowlog-log-slower-than 10000 >/dev/null
      python3 - "$c1" "$c2" "$run" "$keys" <<'PY' | tee -a "$work/flow-cost.txt"
import json, sys
c1, c2 = float(sys.argv[1]), float(sys.argv[2]); r = json.loads(sys.argv[3])
print(f"   keys {sys.argv[4]:>5}: {r['delivered_per_s']:.0f} delivered/s, {(c2 - c1) / r['jobs'] * 1e6:.1f} us of Redis CPU per job, "
      f"{r['missing']} missing, {r['delivered_again']} again")
PY
    done
  done
  python3 - "$work/flow-cost.txt" <<'PY'
import re, statistics, sys
rows = [re.findall(r"keys +(\d+): (\d+) delivered/s, ([\d.]+) us", l)[0] for l in open(sys.argv[1]) if "keys" in l]
by = {"0": [], "10000": []}
for k, rate, cpu in rows: by[k].append((float(rate), float(cpu)))
pairs = list(zip(by["0"], by["10000"]))
print(f"   with 10,000 keys / without: throughput median {statistics.median(k[0] / n[0] for n, k in pairs):.2f}, "
      f"Redis CPU per job median {statistics.median(k[1] / n[1] for n, k in pairs):.2f}")
PY
  rcli flushall >/dev/null
fi

if want history; then
  # Every process reads jobs.attempt_history at start, so a run measures one setting; alternate runs of
  # the script compare them:
  #   for h in false true false true; do DQ__JOBS__ATTEMPT_HISTORY=$h BENCH_ONLY=history scripts/bench.sh; done
  echo; echo "== attempt history ${DQ__JOBS__ATTEMPT_HISTORY:-true}: 50,000 jobs due at once (pushed 8 s ahead), delivered by"
  echo "   dq-consumer to a callback that answers at once (concurrency 64) and acked, their done records kept: Redis CPU"
  echo "   per job over its life, delivery throughput, and Redis memory after (each done record and, with history on,"
  echo "   its one attempt)"
  cpu() { python3 -c "print($(info cpu used_cpu_user) + $(info cpu used_cpu_sys))"; }
  for round in 1 2; do
    rcli flushall >/dev/null
    bench push -n 1000 -c 8 --warmup 0 --topic warm >/dev/null
    rcli flushall >/dev/null
    m1=$(info memory used_memory); c1=$(cpu)
    run=$(bench --json flow --mode cost -n 50000 --keys 0 --lead-ms 8000 --concurrency 64 | tail -1)
    c2=$(cpu); sleep 3; m2=$(info memory used_memory)
    python3 - "$c1" "$c2" "$m1" "$m2" "$run" "${DQ__JOBS__ATTEMPT_HISTORY:-true}" <<'PY'
import json, sys
c1, c2, m1, m2 = map(float, sys.argv[1:5]); r = json.loads(sys.argv[5])
print(f"   history {sys.argv[6]:>5}: {r['delivered_per_s']:.0f} delivered/s, {(c2 - c1) / r['jobs'] * 1e6:.1f} us of Redis CPU per job, "
      f"{(m2 - m1) / r['jobs']:.0f} bytes of Redis memory per done job; {r['missing']} missing, {r['delivered_again']} again")
PY
  done
  rcli flushall >/dev/null
fi

if want batch && [ -n "$cluster" ]; then
  echo; echo "== batch pushes of 100, 64-byte body, 16 connections"
  bench push -n 500000 -c 16 --batch 100 | head -1
  rcli flushall >/dev/null
elif want batch; then
  echo; echo "== batch pushes of 100, 64-byte body, 16 connections; and the ceiling of the two writes every push makes,"
  echo "   SET of the record (97 bytes, as push packs a 64-byte body) and ZADD to a delay bucket, pipelined by"
  echo "   redis-benchmark with no Lua and no HTTP"
  batch=$(bench --json push -n 500000 -c 16 --batch 100 | tail -1)
  rcli flushall >/dev/null
  record=$(printf 'x%.0s' $(seq 97))
  set=$(rbench -c 16 -P 100 -n 1000000 -r 1000000000 SET dq:job:__rand_int__ "$record")
  rcli flushall >/dev/null
  zadd=$(rbench -c 16 -P 100 -n 1000000 -r 1000000000 ZADD dq:delayed:1 __rand_int__ 01M81T0SPBBQBFRQ__rand_int__)
  rcli flushall >/dev/null
  python3 - "$batch" "$set" "$zadd" <<'PY'
import json, sys
b = json.loads(sys.argv[1]); set_ = float(sys.argv[2]); zadd = float(sys.argv[3])
ceiling = 1 / (1 / set_ + 1 / zadd)
print(f"dq batch push: {b['jobs_per_sec']:,.0f} jobs/s (p99 {b['p99_ms']} ms per batch)")
print(f"pipelined SET {set_:,.0f}/s, ZADD {zadd:,.0f}/s: both per job at most {ceiling:,.0f}/s   dq / that: {b['jobs_per_sec']/ceiling:.2f}")
PY
fi

if want reserve; then
  echo; echo "== reserve + ack, 64 workers, one job per reserve; then 10 per reserve, acked in one ack-many request"
  bench reserve-ack -n 100000 -c 64 | head -1
  rcli flushall >/dev/null
  bench reserve-ack -n 100000 -c 64 --batch 10 --topic bench-ra10 | head -1
  rcli flushall >/dev/null
fi

if want memory; then
  echo; echo "== Redis memory and commands per delayed job (100,000 single pushes, 64-byte body)"
  read -r m c < <(per_job)
  echo "memory per job: $m bytes   commands per push (EVALSHA + inner calls): $c"
  # A record is one packed string (docs/redis-keys.md), so a longer body adds about its own length.
  for b in 200 1000; do
    read -r m _ < <(per_job --body-bytes "$b")
    echo "memory per job, $b-byte body: $m bytes"
  done
  rcli flushall >/dev/null
fi

if want lateness; then
  echo; echo "== lateness (reserved-at - due): 2,000 jobs/s due over 10 s, 2 timers, long-poll workers"
  bench lateness --rate 2000 --seconds 10 | head -12
fi

if want cpu; then
  echo; echo "== Redis CPU per job over its whole life (pushed with a delay, promoted, reserved, acked), 2,000 jobs/s"
  echo "   for 10 s; and Redis CPU with no load at all (timers' heartbeats and expiry sweeps)"
  rcli flushall >/dev/null
  cpu() { python3 -c "print($(info cpu used_cpu_user) + $(info cpu used_cpu_sys))"; }
  c0=$(cpu); sleep 5; c1=$(cpu)
  run=$(bench --json lateness --rate 2000 --seconds 10 | tail -1)
  c2=$(cpu)
  python3 - "$c0" "$c1" "$c2" "$run" <<'PY'
import json, sys
c0, c1, c2 = map(float, sys.argv[1:4]); run = json.loads(sys.argv[4])
idle = (c1 - c0) / 5
jobs = run["acked"]
print(f"idle: {idle * 100:.2f}% of a core")
print(f"per job: {(c2 - c1) / jobs * 1e6:.1f} us of Redis CPU ({jobs} jobs acked), "
      f"{((c2 - c1) - idle * 10) / jobs * 1e6:.1f} us without the idle share")
PY
  rcli flushall >/dev/null
fi

if want life; then
  # scripts/profile-life.sh: where Redis's time goes over one job's whole life, on the path LIFE_PATH
  # names: `push` (pushed with a 1.5 s delay in batches of 500, promoted, delivered by dq-consumer to a
  # sink that answers at once, acked), `pull` (pushed ready, reserved 10 at a time and acked with ack
  # many) or `beanstalkd` (put, reserve, delete over the protocol, 4 connections); `bullmq` is BullMQ
  # doing the push path's work on the same Redis (scripts/peers/bullmq-life.mjs), for the ratio.
  path=${LIFE_PATH:-push}
  n=${LIFE_JOBS:-10000}
  # LIFE_RATE: the due jobs a second on the push and bullmq paths (how busy Redis is while they run).
  rate=${LIFE_RATE:-5000}
  echo; echo "== one job's life on the $path path, $n jobs: Redis CPU, script calls and where the time inside them goes"
  cpu() { python3 -c "print($(info cpu used_cpu_user) + $(info cpu used_cpu_sys))"; }
  rcli flushall >/dev/null
  c0=$(cpu); sleep 5; c1=$(cpu); t1=$(date +%s.%N); h1=$(timer_metric dq_jobs_handed_off_total)
  rcli config resetstat >/dev/null
  # LIFE_SCRIPTS=1: also each script's share (logging every call costs Redis a little time of its own).
  [ -n "${LIFE_SCRIPTS:-}" ] && rcli config set slowlog-log-slower-than 0 >/dev/null && \
    rcli config set slowlog-max-len 1000000 >/dev/null && rcli slowlog reset >/dev/null
  case "$path" in
    push) jobs=$(bench --json deliver -n "$n" --rate "$rate" --lead-ms 1500 --concurrency 64 --linger-ms 0 | tail -1 |
                 python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["unique"])') ;;
    pull) jobs=$(bench --json reserve-ack -n "$n" -c 16 --batch 10 --topic "life-$RANDOM" | tail -1 |
                 python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["jobs"])') ;;
    beanstalkd) $bin/dq-bench beanstalkd --addr "127.0.0.1:$bsport" -n $((n / 4)) -c 4 --tube "life-$RANDOM" >/dev/null
                jobs=$(( n / 4 * 4 )) ;;
    bullmq) jobs=$("${pin_rest[@]}" node scripts/peers/bullmq-life.mjs "$rport" "$n" "$rate" | tail -1 |
                   python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["jobs"])') ;;
    *) echo "LIFE_PATH is push, pull, beanstalkd or bullmq, not $path" >&2; exit 2 ;;
  esac
  c2=$(cpu); t2=$(date +%s.%N); h2=$(timer_metric dq_jobs_handed_off_total)
  rcli info commandstats | tr -d '\r' > "$work/commandstats.txt"
  python3 - "$c0" "$c1" "$c2" "$t1" "$t2" "$jobs" "$work/commandstats.txt" "$((h2 - h1))" <<'PY'
import collections, sys
c0, c1, c2, t1, t2 = map(float, sys.argv[1:6]); jobs = int(sys.argv[6])
stats = collections.Counter(); calls = collections.Counter()
for line in open(sys.argv[7]):
    if not line.startswith("cmdstat_"):
        continue
    name, rest = line[8:].strip().split(":", 1)
    f = dict(kv.split("=") for kv in rest.split(","))
    stats[name] += float(f["usec"]); calls[name] += int(f["calls"])
idle = (c1 - c0) / 5
cpu = ((c2 - c1) - idle * (t2 - t1)) / jobs * 1e6
scripts = sum(stats[k] for k in ("evalsha", "eval", "fcall")) / jobs
inner = {k: v for k, v in stats.items() if k not in ("evalsha", "eval", "fcall")}
commands = sum(inner.values()) / jobs
lua = scripts - commands
print(f"| | per job |\n|---|---|")
print(f"| Redis CPU, whole life (without the idle share, {idle * 100:.2f}% of a core) | {cpu:.1f} us |")
print(f"| EVALSHA calls | {calls['evalsha'] / jobs:.2f} |")
print(f"| time inside scripts | {scripts:.1f} us |")
top = ", ".join(f"{k.upper()} {calls[k] / jobs:.1f}" for k, _ in collections.Counter(inner).most_common(6))
print(f"| of which Redis commands (those the scripts call, and the few clients send directly) | {commands:.1f} us ({top}) |")
print(f"| of which Lua itself | {lua:.1f} us ({lua / scripts * 100 if scripts else 0:.0f}% of the time inside scripts) |")
print(f"({jobs} jobs, {int(sys.argv[8])} of them handed off by the timers)")
PY
  [ -n "${LIFE_SCRIPTS:-}" ] && script_times "$jobs" && rcli config set slowlog-log-slower-than 10000 >/dev/null
  rcli flushall >/dev/null
fi

if want cpu-deliver; then
  echo; echo "== Redis CPU per job over its whole life through push delivery: 30,000 jobs pushed over HTTP (batches of"
  echo "   500) with a short delay, promoted, reserved by dq-consumer, POSTed to a sink that answers at once (concurrency"
  echo "   64), acked. Due at 15,000/s (2 s after the push began), then at a steady 3,000/s."
  cpu() { python3 -c "print($(info cpu used_cpu_user) + $(info cpu used_cpu_sys))"; }
  for rate in 15000 3000; do
    rcli flushall >/dev/null; rcli config resetstat >/dev/null
    [ -n "${BENCH_SLOWLOG:-}" ] && rcli config set slowlog-log-slower-than 0 >/dev/null && rcli config set slowlog-max-len 1000000 >/dev/null && rcli slowlog reset >/dev/null
    c0=$(cpu); sleep 5; c1=$(cpu); t1=$(date +%s.%N); u1=$(info cpu used_cpu_user); h1=$(timer_metric dq_jobs_handed_off_total)
    run=$(bench --json deliver -n 30000 --rate "$rate" --lead-ms 2000 --concurrency 64 --linger-ms 0 | tail -1)
    c2=$(cpu); t2=$(date +%s.%N); u2=$(info cpu used_cpu_user); h2=$(timer_metric dq_jobs_handed_off_total)
    calls=$(rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '$1=="cmdstat_evalsha" {s += $3} END {print s+0}')
    python3 - "$c0" "$c1" "$c2" "$run" "$calls" "$t1" "$t2" "$rate" "$u1" "$u2" "$((h2 - h1))" <<'PY'
import json, sys
c0, c1, c2 = map(float, sys.argv[1:4]); run = json.loads(sys.argv[4]); calls = int(sys.argv[5])
t1, t2, rate = float(sys.argv[6]), float(sys.argv[7]), sys.argv[8]
user = (float(sys.argv[10]) - float(sys.argv[9]))
idle = (c1 - c0) / 5
jobs = run["unique"]
print(f"due at {rate}/s: {(c2 - c1) / jobs * 1e6:.1f} us of Redis CPU per job, {((c2 - c1) - idle * (t2 - t1)) / jobs * 1e6:.1f} "
      f"without the idle share ({idle * 100:.2f}% of a core); {calls / jobs:.2f} script calls per job; {jobs} delivered, "
      f"{run['duplicates']} duplicates; lateness p99 {run['p99_ms']} ms; user CPU {user / jobs * 1e6:.1f} us per job; "
      f"{int(sys.argv[11])} handed off by the timers")
PY
    # BENCH_SLOWLOG=1: Redis's time per script (every call logged; the names from the scripts' SHA1s).
    [ -n "${BENCH_SLOWLOG:-}" ] && script_times
    # BENCH_COMMANDSTATS=1: where Redis's time went (commands run inside scripts are counted too).
    if [ -n "${BENCH_COMMANDSTATS:-}" ]; then
      rcli info commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_/ {print $5, $3, $7, $1}' | sort -rn | head -15 |
        awk '{printf "   %-28s %9d calls %10.0f us in all %7.2f us/call\n", $4, $2, $1, $3}'
    fi
  done
  rcli flushall >/dev/null
fi

if want schedules; then
  echo; echo "== schedule firing lateness (the job's created_at - its occurrence): 20 schedules firing every second for 20 s"
  python3 - "http://127.0.0.1:$sport" <<'PY'
import json, sys, time, urllib.request
base = sys.argv[1]
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        data = r.read()
        return json.loads(data) if data else None
names = [f"bench-sched-{i}" for i in range(20)]
for n in names:
    call("PUT", f"/v1/schedules/{n}", {"cron": "* * * * * *", "topic": "bench-sched", "body": {"s": n}})
time.sleep(21)
for n in names:
    call("DELETE", f"/v1/schedules/{n}")
fires = []
while True:
    got = call("POST", "/v1/reserve", {"topics": ["bench-sched"], "count": 100})["jobs"]
    if not got:
        break
    for j in got:
        job = call("GET", f"/v1/jobs/{j['id']}")
        fires.append((job["body"]["s"], job["run_at"], job["created_at"] - job["run_at"]))
        call("POST", f"/v1/jobs/{j['id']}/ack", {"receipt": j["receipt"]})
firsts = {}
for name, run_at, _ in fires:
    firsts[name] = min(firsts.get(name, run_at), run_at)
def summary(late):
    late = sorted(late)
    q = lambda f: late[min(len(late) - 1, int(f * len(late)))]
    return f"{len(late)} occurrences: lateness p50 {q(0.5)} ms, p99 {q(0.99)} ms, max {late[-1]} ms"
print("all:", summary([l for _, _, l in fires]))
print("each schedule's first occurrence left out (the one a change may reach up to 100 ms late):",
      summary([l for n, r, l in fires if r != firsts[n]]))
PY
fi

if want burst; then
  echo; echo "== burst: 100,000 jobs due in the same millisecond (promoted, as the timers' dq_jobs_promoted_total counts)"
  bench burst -n 100000 --promoted-from "$(printf 'http://127.0.0.1:%s/metrics,' "${timer_ports[@]}" | sed 's/,$//')" | head -8
fi

if want deliver; then
  echo; echo "== push delivery to a local callback that answers at once, concurrency 64"
  bench deliver -n 50000 --concurrency 64 | head -8
  echo; echo "== delivery lateness (callback received - due) at 1,000 jobs/s over 10 s"
  bench deliver -n 10000 --rate 1000 --concurrency 64 | head -8
  echo; echo "== a rate-limited topic: callback.rate_per_s 1,000 (burst 10), 20,000 jobs ready at once, concurrency 64"
  run=$(bench --json deliver -n 20000 --concurrency 64 --rate-limit 1000 --burst 10 | tail -1)
  python3 - "$run" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
a, limit = r["achieved_per_s"], r["rate_limit"]
print(f"achieved {a:.1f}/s against a limit of {limit:.0f}/s ({(a / limit - 1) * 100:+.2f}%), {r['unique']} delivered")
PY
fi

if want waiters; then
  echo; echo "== 10,000 long polls waiting on one topic: dq-server's memory per waiter, and Redis commands per push"
  echo "   (a Redis and a dq-server of their own, nothing else on them)"
  wr=$(port); ws=$(port); mkdir -p "$work/waiters"
  redis-server --port "$wr" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/waiters" --logfile "$work/waiters/redis.log" &
  pids+=($!)
  until redis-cli -p "$wr" ping >/dev/null 2>&1; do sleep 0.05; done
  DQ__REDIS__URLS="redis://127.0.0.1:$wr" DQ__SERVER__LISTEN="127.0.0.1:$ws" $bin/dq-server >"$work/waiters/server.log" 2>&1 &
  wpid=$!; pids+=($wpid)
  until (exec 3<>"/dev/tcp/127.0.0.1/$ws") 2>/dev/null; do sleep 0.05; done
  # The load holds one connection per waiter.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  echo "   HTTP/1.1, one connection per long poll:"
  $bin/dq-bench --url "http://127.0.0.1:$ws" waiters -w 10000 --server-pid "$wpid" --redis "redis://127.0.0.1:$wr" | sed -n 2p
  kill "$wpid"; wait "$wpid" 2>/dev/null || true
  DQ__REDIS__URLS="redis://127.0.0.1:$wr" DQ__SERVER__LISTEN="127.0.0.1:$ws" $bin/dq-server >"$work/waiters/server2.log" 2>&1 &
  wpid=$!; pids+=($wpid)
  until (exec 3<>"/dev/tcp/127.0.0.1/$ws") 2>/dev/null; do sleep 0.05; done
  echo "   HTTP/2 (prior knowledge), the long polls as streams of 10 connections:"
  $bin/dq-bench --url "http://127.0.0.1:$ws" waiters -w 10000 --http2-connections 10 --server-pid "$wpid" --redis "redis://127.0.0.1:$wr" | sed -n 2p
  kill "$wpid"; wait "$wpid" 2>/dev/null || true
fi

if want kill; then
  echo; echo "== lateness while one of the two timers is killed (kill -9) halfway"
  bench lateness --rate 2000 --seconds 10 --kill-pid "${timer_pids[0]}" --kill-at 0.5 | head -12
fi
