#!/usr/bin/env bash
# Where Redis's time goes over one job's whole life (push, delay, promote, deliver, ack), per job: Redis
# CPU, EVALSHA calls, the time inside scripts, the part of it spent in the Redis commands they call, and
# the rest, Lua itself; and how many of the jobs the timers handed off to a waiting dq-consumer (docs/
# architecture.md, "Hand-offs"). On a private Redis with the release build (scripts/bench.sh's set-up).
#
#   scripts/profile-life.sh [push|pull|beanstalkd|bullmq] [jobs]   default: push 10000; bullmq: BullMQ 6.7
#                                      doing the push path's work on the same Redis (scripts/peers), for the ratio
#   DQ_BIN=/path/to/other/build scripts/profile-life.sh push   another build, for a before/after table
#   DQ_REDIS_MODE=cluster scripts/profile-life.sh              summed over a local cluster's 3 primaries
#   LIFE_SCRIPTS=1 scripts/profile-life.sh push  also the time of each script, per call and per job
#   LIFE_RATE=15000 scripts/profile-life.sh push 30000   jobs due at 15,000 a second (push, bullmq; default 5000)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-push}" = bullmq ] && bash scripts/ensure-node.sh && (cd scripts/peers && npm ci --no-audit --no-fund --silent >&2)
BENCH_ONLY=life LIFE_PATH=${1:-push} LIFE_JOBS=${2:-10000} exec bash scripts/bench.sh
