#!/usr/bin/env bash
# The long chaos run (docs/chaos.md): the chaos test of tests/e2e/tests/chaos/ against release binaries,
# with 20,000 jobs and one fault per second, its figures printed as it goes and summed up at the end.
#
#   scripts/chaos.sh                        20,000 jobs at 20 pushes/s, a fault every 1000 ms (about 17 min)
#   DQ_CHAOS_JOBS=5000 scripts/chaos.sh     another size; DQ_CHAOS_RATE, DQ_CHAOS_FAULT_MS, DQ_CHAOS_PAUSE_MS,
#                                           DQ_CHAOS_SETTLE_S, DQ_CHAOS_SEED and DQ_CHAOS_VERBOSE=1 are passed on
#   DQ_BIN_DIR=/other/build scripts/chaos.sh   the binaries of another build (nothing is built then)
#
# The whole output goes to target/chaos/<time>.out, and every dq process's log (each life of each process)
# to target/chaos/<time>.logs/. Exits with the test's status.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh

if [ -z "${DQ_BIN_DIR:-}" ]; then
  cargo build --release --bins --locked
  export DQ_BIN_DIR="$PWD/target/release"
fi
# The test is built (in the dev profile; it only drives HTTP) before the clock starts.
cargo test -p dq-e2e --test chaos --locked --no-run

export DQ_CHAOS_JOBS="${DQ_CHAOS_JOBS:-20000}"
export DQ_CHAOS_RATE="${DQ_CHAOS_RATE:-20}"
export DQ_CHAOS_FAULT_MS="${DQ_CHAOS_FAULT_MS:-1000}"
export DQ_CHAOS_VERBOSE="${DQ_CHAOS_VERBOSE:-1}"  # every fault in the output file (left out of the summary)
stamp=$(date +%Y%m%d-%H%M%S)
mkdir -p target/chaos
out="target/chaos/$stamp.out"
export DQ_CHAOS_LOG_DIR="$PWD/target/chaos/$stamp.logs"

echo "==> chaos: $DQ_CHAOS_JOBS jobs at $DQ_CHAOS_RATE pushes/s, a fault every $DQ_CHAOS_FAULT_MS ms, binaries in $DQ_BIN_DIR"
echo "==> output in $out, process logs in $DQ_CHAOS_LOG_DIR"
started=$(date +%s)
set +e
cargo test -p dq-e2e --test chaos --locked -- --nocapture --test-threads 1 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
set -e
took=$(( $(date +%s) - started ))

echo
echo "==> chaos summary ($DQ_CHAOS_JOBS jobs, $DQ_CHAOS_RATE pushes/s, a fault every $DQ_CHAOS_FAULT_MS ms; ${took} s in all)"
# The test's summary lines, without the per-fault and per-duplicate detail lines.
grep '^chaos:' "$out" | grep -v -e '^chaos:     at ' -e '^chaos:   duplicate ' -e '^chaos: fault at ' || true
if [ "$status" -eq 0 ]; then
  echo "==> chaos: passed"
else
  echo "==> chaos: FAILED (status $status); see $out and $DQ_CHAOS_LOG_DIR"
fi
exit "$status"
