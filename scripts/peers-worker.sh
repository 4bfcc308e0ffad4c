#!/usr/bin/env bash
# Pull consumption on one Redis, three ways, alternated in one run (absolute numbers drift on shared
# machines; the ratios are the figure):
#   dq one-by-one   dq-bench reserve-ack -c 64                         (reserve one, ack one, bare HTTP)
#   dq worker       dq-bench reserve-ack -c 64 --batch 10 --worker     (dq_client::Worker: reserve 10, ack many)
#   BullMQ worker   scripts/peers/bullmq-worker.mjs, concurrency 64   (jobs removed on completion)
# Each fills its queue first (untimed) and times the drain of N jobs by a handler that does nothing.
#   scripts/peers-worker.sh              N=100000, 2 rounds
#   N=30000 ROUNDS=3 scripts/peers-worker.sh
#   DQ_BIN=/path/to/build scripts/peers-worker.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
bash scripts/ensure-node.sh
N=${N:-100000}
ROUNDS=${ROUNDS:-2}
[ -n "${DQ_BIN:-}" ] || cargo build --release --bins --locked >&2
bin=${DQ_BIN:-target/release}
(cd scripts/peers && npm ci --no-audit --no-fund --silent >&2)

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(port); sport=$(port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --logfile "$work/redis.log" &
pids+=($!)
until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.05; done
DQ__REDIS__URLS="redis://127.0.0.1:$rport" DQ__SERVER__LISTEN="127.0.0.1:$sport" DQ__METRICS__LISTEN="127.0.0.1:$(port)" \
  "$bin/dq-server" > "$work/server.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$sport/healthz" >/dev/null; do sleep 0.05; done

rate() { python3 -c 'import json,sys; r=json.loads(sys.stdin.readlines()[-1]); print(round(r.get("jobs_per_sec", r.get("per_s")), 1))'; }
declare -a one worker bull
for round in $(seq "$ROUNDS"); do
  redis-cli -p "$rport" flushall >/dev/null
  one+=($("$bin/dq-bench" --url "http://127.0.0.1:$sport" --json reserve-ack -n "$N" -c 64 --topic "one-$round" 2>/dev/null | rate))
  redis-cli -p "$rport" flushall >/dev/null
  worker+=($("$bin/dq-bench" --url "http://127.0.0.1:$sport" --json reserve-ack -n "$N" -c 64 --batch 10 --worker --topic "worker-$round" 2>/dev/null | rate))
  redis-cli -p "$rport" flushall >/dev/null
  bull+=($(node scripts/peers/bullmq-worker.mjs "$rport" "$N" 64 | rate))
  echo "round $round: dq one-by-one ${one[-1]}/s, dq worker ${worker[-1]}/s, BullMQ worker ${bull[-1]}/s"
done
python3 - "${one[*]}" "${worker[*]}" "${bull[*]}" <<'PY'
import sys
one, worker, bull = ([float(x) for x in a.split()] for a in sys.argv[1:4])
ratios = lambda a, b: ", ".join(f"{x / y:.2f}" for x, y in zip(a, b))
print(f"dq worker / dq one-by-one: {ratios(worker, one)} (goal >= 3)")
print(f"dq worker / BullMQ worker: {ratios(worker, bull)} (goal >= 2)")
PY
