#!/usr/bin/env bash
# Installs Debian's Chromium when missing: the browser test drives it headless (tests/e2e/tests/browser.rs).
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  echo "==> installing chromium (apt-get)" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium >/dev/null
fi
