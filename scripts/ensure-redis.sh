#!/usr/bin/env bash
# Installs redis-server (and redis-tools) from the distribution when missing. Sourced by the other scripts.
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "==> installing redis-server (apt-get)" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
fi
