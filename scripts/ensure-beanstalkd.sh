#!/usr/bin/env bash
# Installs what the beanstalkd tests run (tests/e2e/tests/beanstalkd_*.rs) when missing: the real beanstalkd
# 1.12 (only its binary: the tests start their own, in memory, on a free port), php-cli and Pheanstalk 4
# (php-pda-pheanstalk, for the PHP client test). The package's system service is kept from running: a
# policy-rc.d refuses its start during the install, and it is stopped and disabled should it run anyway.
set -euo pipefail
PHEANSTALK_AUTOLOAD=/usr/share/php/Pheanstalk/autoload.php
if command -v beanstalkd >/dev/null 2>&1 && command -v php >/dev/null 2>&1 && [ -f "$PHEANSTALK_AUTOLOAD" ]; then
  exit 0
fi
echo "==> installing beanstalkd, php-cli and php-pda-pheanstalk (apt-get)" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  # invoke-rc.d asks this before starting a service; 101 means "not allowed". Removed again on exit.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod 755 "$POLICY"
  trap '$SUDO rm -f "$POLICY"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends beanstalkd php-cli php-pda-pheanstalk >/dev/null
if [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now beanstalkd.service beanstalkd.socket >/dev/null 2>&1 || true
elif command -v service >/dev/null 2>&1; then
  $SUDO service beanstalkd stop >/dev/null 2>&1 || true
  $SUDO update-rc.d beanstalkd disable >/dev/null 2>&1 || true
fi
beanstalkd -v >&2
