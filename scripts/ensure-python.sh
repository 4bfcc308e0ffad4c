#!/usr/bin/env bash
# Makes the Python tools the tests run, in a virtualenv at the repository's root (.venv, not committed):
# schemathesis, which fuzzes every route against GET /openapi.json (crates/dq-server/tests/schemathesis.rs),
# openapi-python-client, which generates a Python client from that document for tests/e2e/tests/openapi_client.rs,
# and greenstalk, the beanstalkd client tests/e2e/clients/beanstalkd/greenstalk_client.py runs on.
# The versions are pinned in scripts/python-requirements.txt (those and everything they pull in).
# Idempotent: when the venv already holds exactly those versions it returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUIREMENTS=scripts/python-requirements.txt
VENV=.venv
STAMP="$VENV/.requirements.sha256"
want=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [ -x "$VENV/bin/st" ] && [ -x "$VENV/bin/openapi-python-client" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  echo "==> installing python3-venv (apt-get)" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq python3 python3-venv >/dev/null
fi
echo "==> installing schemathesis, openapi-python-client and greenstalk into $VENV (pip)" >&2
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --requirement "$REQUIREMENTS"
"$VENV/bin/st" --version >&2
"$VENV/bin/openapi-python-client" --version >&2
echo "$want" >"$STAMP"
