#!/usr/bin/env bash
# Installs dq on this machine as systemd services: the binaries, a `dq` system user, /etc/dq and the
# units. Run it as root. It is idempotent: run it again to upgrade the binaries and the units; it never
# touches an existing /etc/dq/dq.toml or /etc/dq/dq.env.
#
#   sudo deploy/install.sh                  # cargo build --release --bins, then install
#   cargo build --release --bins && sudo deploy/install.sh --no-build     # build as yourself (better)
#   sudo deploy/install.sh --no-build --bin-dir /path/to/binaries
#   DESTDIR=/tmp/stage deploy/install.sh --no-build   # stage every file under /tmp/stage (no root needed)
#
# With DESTDIR set, every path is prefixed with it and nothing outside it is changed: no user is
# created, no owner is set, systemd is not reloaded (the script says what it skipped).
# See systemd/README.md.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
binaries=(dq-server dq-timer dq-consumer dq-checker dq-bench dq)
units=(dq-server.service dq-checker.service dq-timer@.service dq-consumer@.service)

usage() {
  cat <<EOF
usage: $0 [--no-build] [--bin-dir DIR]

  --no-build      do not run cargo; take the binaries from --bin-dir
  --bin-dir DIR   where the built binaries are (default: \$DQ_BIN_DIR, else $repo/target/release)

environment:
  DESTDIR         install under this directory instead of / (for packaging and tests)
  DQ_BIN_DIR      same as --bin-dir
EOF
}

say() { printf '%s\n' "$*"; }
die() {
  printf 'install.sh: %s\n' "$*" >&2
  exit 1
}

build=1
bin_dir="${DQ_BIN_DIR:-}"
while (($#)); do
  case "$1" in
    --no-build) build=0 ;;
    --bin-dir)
      (($# >= 2)) || die "--bin-dir needs a directory"
      bin_dir="$2"
      shift
      ;;
    --bin-dir=*) bin_dir="${1#--bin-dir=}" ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      usage >&2
      die "unknown argument: $1"
      ;;
  esac
  shift
done
bin_dir="${bin_dir:-$repo/target/release}"

destdir="${DESTDIR:-}"
destdir="${destdir%/}"
if [[ -n "$destdir" ]]; then
  [[ "$destdir" == /* ]] || die "DESTDIR must be an absolute path, got $destdir"
elif ((EUID != 0)); then
  die "run as root (sudo $0 ...), or set DESTDIR=/some/dir to stage the files there"
fi

prefix_bin="$destdir/usr/local/bin"
etc_dq="$destdir/etc/dq"
unit_dir="$destdir/etc/systemd/system"

# --- binaries -----------------------------------------------------------------------------------------
if ((build)); then
  command -v cargo >/dev/null ||
    die "cargo not found (sudo drops your PATH): build as yourself with 'cargo build --release --bins', then run: sudo $0 --no-build"
  say "==> cargo build --release --bins"
  (cd "$repo" && cargo build --release --bins --locked)
fi
for b in "${binaries[@]}"; do
  [[ -x "$bin_dir/$b" ]] || die "$bin_dir/$b is missing or not executable (build first, or give --bin-dir)"
done

say "==> binaries -> $prefix_bin"
install -d -m 0755 "$prefix_bin"
for b in "${binaries[@]}"; do
  if cmp -s "$bin_dir/$b" "$prefix_bin/$b"; then
    say "    $b unchanged"
    continue
  fi
  # Install beside it, then rename over it: a running binary is replaced, not rewritten in place.
  install -m 0755 "$bin_dir/$b" "$prefix_bin/.$b.new"
  mv -f "$prefix_bin/.$b.new" "$prefix_bin/$b"
  say "    $b installed"
done

# --- user ---------------------------------------------------------------------------------------------
if [[ -n "$destdir" ]]; then
  say "==> DESTDIR set: skipped creating the system user and group dq"
else
  say "==> system user dq"
  if ! getent group dq >/dev/null; then
    groupadd --system dq
    say "    group dq created"
  fi
  if ! id -u dq >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --gid dq dq
    say "    user dq created"
  else
    say "    user dq exists"
  fi
fi

# --- /etc/dq ------------------------------------------------------------------------------------------
# Both files may hold secrets (Redis passwords in redis.urls): readable by root and the dq group only.
owner() {
  if [[ -z "$destdir" ]]; then
    chown root:dq "$1"
  fi
}
say "==> configuration in $etc_dq"
install -d -m 0755 "$etc_dq"
if [[ -e "$etc_dq/dq.toml" || -L "$etc_dq/dq.toml" ]]; then
  say "    dq.toml exists: kept as it is (the shipped defaults are in deploy/dq.toml)"
else
  install -m 0640 "$repo/deploy/dq.toml" "$etc_dq/dq.toml"
  owner "$etc_dq/dq.toml"
  say "    dq.toml installed (the defaults; edit it, e.g. redis.mode and redis.urls)"
fi
if [[ -e "$etc_dq/dq.env" || -L "$etc_dq/dq.env" ]]; then
  say "    dq.env exists: kept as it is"
else
  # No settings, only how to use it.
  install -m 0640 /dev/null "$etc_dq/dq.env"
  cat >"$etc_dq/dq.env" <<'EOF'
# Environment of every dq unit: DQ__SECTION__KEY=value lines override /etc/dq/dq.toml, e.g.
#   DQ__REDIS__MODE=cluster
#   DQ__REDIS__URLS=redis://:secret@10.0.0.7:7000,redis://:secret@10.0.0.8:7000
#   DQ__LOG__FORMAT=json
#   DQ__AUTH__ADMIN_TOKEN=<a long random string>   one API token with every scope (docs/security.md)
#   DQ__SECRETS__KEYS=<openssl rand -base64 32>     seals callback secrets in Redis (docs/security.md)
#   DQ__TELEMETRY__OTLP_ENDPOINT=http://127.0.0.1:4318   spans of traced jobs to an OTLP/HTTP collector
# Do not set DQ__METRICS__LISTEN here: it would override every instance's own port (systemd/README.md).
EOF
  owner "$etc_dq/dq.env"
  say "    dq.env created (no settings yet)"
fi
if [[ -n "$destdir" ]]; then
  say "    DESTDIR set: skipped chown root:dq of dq.toml and dq.env"
fi

# --- units --------------------------------------------------------------------------------------------
say "==> units -> $unit_dir"
install -d -m 0755 "$unit_dir"
for u in "${units[@]}"; do
  if cmp -s "$repo/systemd/$u" "$unit_dir/$u"; then
    say "    $u unchanged"
  else
    install -m 0644 "$repo/systemd/$u" "$unit_dir/$u"
    say "    $u installed (local changes belong in drop-ins: systemctl edit $u)"
  fi
done

if [[ -n "$destdir" ]]; then
  say "==> DESTDIR set: skipped systemctl daemon-reload"
elif [[ -d /run/systemd/system ]]; then
  say "==> systemctl daemon-reload"
  systemctl daemon-reload
else
  say "==> systemd is not running here: skipped systemctl daemon-reload"
fi

cat <<'EOF'

Next steps:
  1. Point dq at Redis: edit /etc/dq/dq.toml (redis.mode, redis.urls, ...) or add DQ__... lines to /etc/dq/dq.env.
     Coming from a release with redis.shards: stop dq and run dq-checker migrate first (docs/operations.md).
  2. Start the services. Timer and consumer instances are named by their metrics port
     (timers 9801..9899, consumers 9901..9999; see systemd/README.md):
       systemctl enable --now dq-server dq-checker dq-timer@9801 dq-timer@9802 dq-consumer@9901 dq-consumer@9902
  3. Check them:
       systemctl status dq-server dq-checker 'dq-timer@*' 'dq-consumer@*'
       curl -s 127.0.0.1:6789/readyz; curl -s 127.0.0.1:9801/healthz
  After an upgrade, restart what runs (each drains first):
       systemctl restart dq-server dq-checker 'dq-timer@*' 'dq-consumer@*'
  Prometheus: deploy/prometheus/scrape.yml and deploy/prometheus/alerts.yml.
EOF
