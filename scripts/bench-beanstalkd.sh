#!/usr/bin/env bash
# dq's beanstalkd listener against the real beanstalkd, on this machine in one run: a private redis-server
# with an AOF (appendfsync everysec), dq-server with its beanstalkd listener and a dq-timer (release build),
# and a beanstalkd in memory (no binlog). `dq-bench beanstalkd` loads each in turn, R rounds, alternating;
# then the ratios dq / beanstalkd of the median put and reserve + delete throughputs are printed.
#
#   scripts/bench-beanstalkd.sh                 3 rounds of 64 connections × 1000 jobs of 64 bytes
#   ROUNDS=5 CONNECTIONS=16 JOBS=5000 BODY=1024 scripts/bench-beanstalkd.sh
#   PIPELINE=100 scripts/bench-beanstalkd.sh    a pipelining client: 100 commands per write, then their replies
#   PRIORITY=1024 scripts/bench-beanstalkd.sh   the puts' priority (default 0)
#   TOKIO_WORKER_THREADS=1 scripts/bench-beanstalkd.sh   dq-server on one runtime thread (operations.md, Threads)
# For dq's rounds it also prints dq-server's and Redis's CPU per job (put, reserve and delete), from
# /proc/<pid>/stat before and after (not with DQ_ADDR).
#   DQ_BIN=/path/to/other/build scripts/bench-beanstalkd.sh   the binaries of another build (not built here)
#   DQ_ADDR=127.0.0.1:11300 scripts/bench-beanstalkd.sh      load that server as the "dq" side (dq not started)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
bash scripts/ensure-beanstalkd.sh
rounds=${ROUNDS:-3} connections=${CONNECTIONS:-64} jobs=${JOBS:-1000} body=${BODY:-64} pipeline=${PIPELINE:-1} priority=${PRIORITY:-0}
[ -n "${DQ_BIN:-}" ] || cargo build --release --bins --locked >&2
bin=${DQ_BIN:-target/release}

work=$(mktemp -d)
port() { bash scripts/free-port.sh; }
pids=()
# Kills what the script started; keeps the script's exit status.
cleanup() {
  local status=$?
  for p in "${pids[@]}"; do { kill -9 "$p" && wait "$p"; } 2>/dev/null || true; done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
# Waits up to 30 s for 127.0.0.1:$1 to accept connections; else prints log $2 and fails.
wait_port() {
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on 127.0.0.1:$1 after 30 s" >&2; cat "${2:-/dev/null}" >&2; exit 1
}

bport=$(port)
beanstalkd -l 127.0.0.1 -p "$bport" &
pids+=($!)
wait_port "$bport"

if [ -n "${DQ_ADDR:-}" ]; then
  dq_addr=$DQ_ADDR
else
  rport=$(port)
  redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly yes --appendfsync everysec \
    --dir "$work" --logfile "$work/redis.log" &
  pids+=($!)
  redis_pid=$!
  until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.05; done
  dq_addr="127.0.0.1:$(port)"
  export DQ__REDIS__URLS="redis://127.0.0.1:$rport" DQ__LOG__LEVEL=warn
  DQ__SERVER__LISTEN="127.0.0.1:$(port)" DQ__BEANSTALKD__LISTEN="$dq_addr" $bin/dq-server >"$work/server.log" 2>&1 &
  pids+=($!)
  server_pid=$!
  DQ__METRICS__LISTEN="127.0.0.1:$(port)" $bin/dq-timer >"$work/timer.log" 2>&1 &
  pids+=($!)
  wait_port "${dq_addr##*:}" "$work/server.log"
fi

echo "beanstalkd $(beanstalkd -v | awk '{print $2}') at 127.0.0.1:$bport, dq at $dq_addr; $(nproc) cores;" \
  "$rounds rounds of $connections connections × $jobs jobs of $body bytes, $pipeline command(s) per write"
results="$work/results"
# CPU seconds (user + system) process $1 has used.
cpu() { awk -v t="$(getconf CLK_TCK)" '{ print ($14 + $15) / t }' "/proc/$1/stat"; }
for round in $(seq "$rounds"); do
  for side in dq beanstalkd; do
    addr=$dq_addr
    [ "$side" = beanstalkd ] && addr="127.0.0.1:$bport"
    [ -n "${server_pid:-}" ] && before="$(cpu "$server_pid") $(cpu "$redis_pid")"
    line=$($bin/dq-bench --json beanstalkd --addr "$addr" -c "$connections" -n "$jobs" --body-bytes "$body" --pipeline "$pipeline" --priority "$priority" | tail -1) || true
    echo "$side $line" >>"$results"
    python3 - "$round" "$side" "$line" <<'PY'
import json, sys
r = json.loads(sys.argv[3])
put, rd = r["put_jobs_per_sec"], r["reserve_delete_jobs_per_sec"]
print(f"round {sys.argv[1]} {sys.argv[2]:<10}  put {put:>9,.0f}/s   reserve+delete {rd:>9,.0f}/s   errors {r['errors']}")
PY
    if [ "$side" = dq ] && [ -n "${server_pid:-}" ]; then
      read -r s0 r0 <<<"$before"
      awk -v s0="$s0" -v s1="$(cpu "$server_pid")" -v r0="$r0" -v r1="$(cpu "$redis_pid")" -v n=$((connections * jobs)) \
        'BEGIN { printf "         CPU per job (put, reserve and delete): dq-server %.1f µs, Redis %.1f µs\n", (s1 - s0) * 1e6 / n, (r1 - r0) * 1e6 / n }'
    fi
  done
done
python3 - "$results" <<'PY'
import json, statistics, sys
runs = {"dq": [], "beanstalkd": []}
for line in open(sys.argv[1]):
    side, text = line.split(" ", 1)
    runs[side].append(json.loads(text))
def median(side, key):
    return statistics.median(r[key] for r in runs[side])
for label, key in [("put", "put_jobs_per_sec"), ("reserve+delete", "reserve_delete_jobs_per_sec")]:
    dq, bs = median("dq", key), median("beanstalkd", key)
    print(f"{label:<15} dq {dq:>9,.0f}/s   beanstalkd {bs:>9,.0f}/s   dq/beanstalkd {dq / bs:.2f}")
PY
