#!/usr/bin/env bash
# The long soak run (docs/operations.md, "Soak testing"): the soak test of tests/e2e/tests/soak.rs against
# release binaries, for an hour by default, printing the growth per hour of Redis's memory and of each
# dq process's RSS, and the size of dq-server's ready index.
#
#   scripts/soak.sh                          3600 s of load
#   DQ_SOAK_SECS=600 scripts/soak.sh         another length
#   DQ_SOAK_TOPICS=200 scripts/soak.sh       pulled topics cycle over 200 names (default: a new one each
#                                            round, which grows every process's per-topic metric series)
#   DQ_BIN_DIR=/other/build scripts/soak.sh  the binaries of another build (nothing is built then)
#
# The output goes to target/soak/<time>.out as well. Exits with the test's status.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh

if [ -z "${DQ_BIN_DIR:-}" ]; then
  cargo build --release --bins --locked
  export DQ_BIN_DIR="$PWD/target/release"
fi
cargo test -p dq-e2e --test soak --locked --no-run

export DQ_SOAK_SECS="${DQ_SOAK_SECS:-3600}"
mkdir -p target/soak
out="target/soak/$(date +%Y%m%d-%H%M%S).out"
echo "==> soak: $DQ_SOAK_SECS s of load, binaries in $DQ_BIN_DIR, output in $out"
set +e
cargo test -p dq-e2e --test soak --locked -- --nocapture 2>&1 | tee "$out"
status=${PIPESTATUS[0]}
set -e
echo
echo "==> soak summary"
grep -E '^(soak:|redis used_memory|dq-[a-z]+ (RSS|ready index))' "$out" || true
exit "$status"
