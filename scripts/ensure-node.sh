#!/usr/bin/env bash
# Installs Node.js from the distribution when `node` is missing: tests/e2e/tests/examples.rs runs the Node
# client examples (examples/node, Node 18+ for fetch). Sourced by scripts/test.sh.
set -euo pipefail
if ! command -v node >/dev/null 2>&1; then
  echo "==> installing nodejs (apt-get)" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq nodejs >/dev/null
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 18 ]; then
  echo "node $(node --version) is too old for the examples (they need fetch, Node 18+)" >&2
  exit 1
fi
