#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration and end-to-end tests, each against a real
# redis-server the tests start themselves (installed here when missing, with Chromium for the browser test,
# Node.js for the client examples, schemathesis and greenstalk in .venv for the OpenAPI fuzz test and the
# beanstalkd client test, and beanstalkd, PHP and Pheanstalk for the beanstalkd protocol tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh
bash scripts/ensure-chromium.sh
bash scripts/ensure-node.sh
bash scripts/ensure-python.sh
bash scripts/ensure-beanstalkd.sh

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "==> building the binaries the end-to-end tests start"
cargo build --workspace --bins --locked
echo "==> tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
