#!/usr/bin/env bash
# Runs dq on this machine: a local Redis (installed when missing) and the dq binaries, until Ctrl-C.
# Everything lives under .dq-local/ (Redis data, logs). Ports: Redis 6379 unless DQ_LOCAL_REDIS_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh

root="$PWD/.dq-local"
mkdir -p "$root"
port="${DQ_LOCAL_REDIS_PORT:-6379}"
export DQ__REDIS__URLS="redis://127.0.0.1:$port"
# An admin token for the API, made once and kept in .dq-local/token (the README's tour reads it).
if [ -z "${DQ__AUTH__ADMIN_TOKEN:-}" ]; then
  [ -s "$root/token" ] || (umask 077; od -An -tx1 -N24 /dev/urandom | tr -d ' \n' >"$root/token")
  DQ__AUTH__ADMIN_TOKEN=$(cat "$root/token")
fi
export DQ__AUTH__ADMIN_TOKEN
# The beanstalkd protocol (docs/beanstalkd.md), on loopback.
export DQ__BEANSTALKD__LISTEN="${DQ__BEANSTALKD__LISTEN:-127.0.0.1:11300}"
# A key that seals callback secrets in Redis, made once and kept in .dq-local/secrets.key.
if [ -z "${DQ__SECRETS__KEYS:-}" ]; then
  [ -s "$root/secrets.key" ] || (umask 077; head -c 32 /dev/urandom | base64 >"$root/secrets.key")
  DQ__SECRETS__KEYS=$(cat "$root/secrets.key")
fi
export DQ__SECRETS__KEYS

echo "==> building dq (release)"
cargo build --release --bins --locked

pids=()
cleanup() {
  echo "==> stopping"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

if redis-cli -p "$port" ping >/dev/null 2>&1; then
  echo "==> using the Redis already answering on port $port"
else
  echo "==> starting redis-server on port $port (AOF on, noeviction; data in $root)"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$root" --appendonly yes \
    --maxmemory-policy noeviction --logfile "$root/redis.log" &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

start() {
  local name=$1; shift
  "target/release/$name" "$@" >>"$root/$name.log" 2>&1 &
  pids+=($!)
}
for bin in dq-server dq-timer dq-consumer dq-checker; do
  if [ -x "target/release/$bin" ]; then start "$bin"; fi
done

listen="${DQ__SERVER__LISTEN:-127.0.0.1:6789}"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/${listen%:*}/${listen##*:}") 2>/dev/null && break; sleep 0.1; done
sleep 0.5
for pid in "${pids[@]}"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "a dq process exited at start; see the logs:" >&2
    tail -n 5 "$root"/*.log >&2
    exit 1
  fi
done
cat <<MSG

dq is running (logs in $root/):
  API       http://$listen/v1/jobs
  stats     http://$listen/v1/stats
  metrics   http://$listen/metrics
  ready     http://$listen/readyz
  API docs  http://$listen/docs   (Swagger UI over http://$listen/openapi.json)
  admin     http://$listen/admin   (log in with the token below)
  beanstalkd $DQ__BEANSTALKD__LISTEN   (the beanstalkd protocol: any beanstalkd client)
  token     $DQ__AUTH__ADMIN_TOKEN   (in $root/token; every scope)
  timer     http://127.0.0.1:9791/metrics   consumer http://127.0.0.1:9792/metrics   checker http://127.0.0.1:9793/metrics
  Redis     redis://127.0.0.1:$port

Try:  export DQ_TOKEN=\$(cat $root/token)
      target/release/dq push hello '{"n":1}' --delay 2s && target/release/dq stats   # the dq command line
  or
      curl -s -XPOST http://$listen/v1/jobs -H "authorization: Bearer \$DQ_TOKEN" \\
           -H 'content-type: application/json' -d '{"topic":"hello","body":{"n":1},"delay_ms":2000}'
  or, as a beanstalkd client would:
      bash -c 'exec 3<>/dev/tcp/${DQ__BEANSTALKD__LISTEN%:*}/${DQ__BEANSTALKD__LISTEN##*:}; printf "put 0 0 60 5\\r\\nhello\\r\\n" >&3; head -1 <&3'
Ctrl-C stops everything.
MSG
wait
