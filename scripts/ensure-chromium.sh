#!/usr/bin/env bash
# Installs Debian's Chromium and its WebDriver (chromium-driver) when missing: the browser tests drive
# it headless, by its command line and through chromedriver (tests/e2e/tests/browser.rs).
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "==> installing chromium and chromium-driver (apt-get)" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi
