#!/usr/bin/env bash
# Install pin-proxy as a systemd service: build, install the binary, the unit,
# the state directory /var/lib/pin-proxy and (only when none exists)
# /etc/pin-proxy/config.yaml, validate the config, then enable the service,
# and start it unless the config was just installed.
#
# Idempotent: re-running upgrades the binary and the unit and keeps an
# existing config. When the binary or the unit changed and the service runs,
# it performs a live upgrade (`pin-proxy upgrade`): the running process hands
# every listener and connection to the new binary and exits; no client
# notices. A unit change applies at the next restart. If the live upgrade
# fails, the old process keeps serving unchanged and this script says why.
#
# Usage: deploy/install.sh [OPTIONS]
#   --bin FILE       install FILE instead of building (cargo build --release --locked)
#   --config FILE    initial config when /etc/pin-proxy/config.yaml is absent
#                    (default: deploy/config.litecoin-p2p.yaml, else the repo's config.yaml)
#   --prefix DIR     install the binary to DIR/bin (default: /usr/local)
#   --destdir DIR    stage every file under DIR (also env DESTDIR): creates no
#                    user, changes no owner, runs no systemctl; needs no root
#   --no-start       enable the service but do not start or restart it
#   -h, --help       this text
#
# A first install (no config yet) enables the service but does not start it:
# the example config names placeholder nodes. Edit it, then start it.
# SYSTEMCTL=PATH runs PATH in place of systemctl, even with --destdir (a
# dry run that records the calls).
#
# Typical: cargo build --release --locked && sudo deploy/install.sh --bin target/release/pin-proxy
# (building as your own user keeps root out of ~/.cargo; plain `sudo deploy/install.sh`
# builds as root, which needs cargo on root's PATH).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=""
config=""
prefix=/usr/local
destdir=${DESTDIR:-}
start=1
user=pin-proxy
systemctl=${SYSTEMCTL:-}
fresh_config=0

say() { echo "install: $*"; }
die() {
    echo "install: error: $*" >&2
    exit 1
}
usage() { sed -n '/^# Usage:/,/^# *-h, --help/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=${2:?--bin needs a file}; shift 2 ;;
    --config) config=${2:?--config needs a file}; shift 2 ;;
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --destdir) destdir=${2:?--destdir needs a directory}; shift 2 ;;
    --no-start) start=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
    esac
done

case "$prefix" in /*) ;; *) die "--prefix must be an absolute path: $prefix" ;; esac
if [ -n "$destdir" ]; then
    mkdir -p "$destdir"
    destdir=$(cd "$destdir" && pwd)
elif [ "$(id -u)" -ne 0 ]; then
    die "run as root (sudo), or stage into a directory with --destdir"
fi

# --- Build ----------------------------------------------------------------
if [ -z "$bin" ]; then
    command -v cargo >/dev/null 2>&1 ||
        die "cargo not found; build first and pass --bin target/release/pin-proxy"
    say "building: cargo build --release --locked"
    (cd "$repo" && cargo build --release --locked)
    bin=$repo/target/release/pin-proxy
fi
[ -x "$bin" ] || die "not an executable: $bin"

if [ -z "$config" ]; then
    config=$repo/deploy/config.litecoin-p2p.yaml
    [ -f "$config" ] || config=$repo/config.yaml
fi
[ -f "$config" ] || die "no such config: $config"

# --- User -----------------------------------------------------------------
# A dedicated system user (see the comment in systemd/pin-proxy.service for
# why not DynamicUser): it owns nothing but reads the config through its group.
if [ -z "$destdir" ] && ! getent passwd "$user" >/dev/null; then
    say "creating system user $user"
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin --comment "pin-proxy balancer" "$user"
fi

# --- Files ----------------------------------------------------------------
changed=0

# install_file MODE SRC DEST: install SRC as DEST unless identical; sets `changed`.
# `install` unlinks the old file first, so replacing a running binary is safe.
install_file() {
    if [ -f "$3" ] && cmp -s "$2" "$3"; then
        say "unchanged: $3"
    else
        install -D -m "$1" "$2" "$3"
        say "installed: $3"
        changed=1
    fi
}

bin_dest=$destdir$prefix/bin/pin-proxy
install_file 0755 "$bin" "$bin_dest"

# The unit names /usr/local/bin/pin-proxy; follow --prefix.
unit_tmp=$(mktemp)
trap 'rm -f "$unit_tmp"' EXIT
sed "s#/usr/local/bin/pin-proxy#$prefix/bin/pin-proxy#g" \
    "$repo/systemd/pin-proxy.service" >"$unit_tmp"
before_unit=$changed
changed=0
install_file 0644 "$unit_tmp" "$destdir/etc/systemd/system/pin-proxy.service"
unit_changed=$changed
[ "$before_unit" -eq 1 ] && changed=1

# The config may hold probe_url credentials: root writes it, the service's
# group reads it, nobody else does. An existing config is never overwritten.
etc=$destdir/etc/pin-proxy
conf=$etc/config.yaml
install -d -m 0750 "$etc"
[ -n "$destdir" ] || chown "root:$user" "$etc"
if [ -e "$conf" ]; then
    say "kept existing: $conf"
else
    install -m 0640 "$config" "$conf"
    [ -n "$destdir" ] || chown "root:$user" "$conf"
    fresh_config=1
    say "installed: $conf (from ${config#"$repo"/}; edit the backends)"
fi

# state_file (/var/lib/pin-proxy/state.json in the example configs): the
# unit's StateDirectory= makes this directory at every start; made here too,
# owned by the service user, so the check below (as that user) can see it is
# writable before the first start.
state=$destdir/var/lib/pin-proxy
install -d -m 0750 "$state"
[ -n "$destdir" ] || chown "$user:$user" "$state"

# --- Validate -------------------------------------------------------------
# As the service user when installing for real, so a file it cannot read
# fails here rather than at start.
say "checking: $conf"
if [ -z "$destdir" ] && command -v runuser >/dev/null 2>&1; then
    runuser -u "$user" -- "$bin_dest" check -c "$conf" ||
        die "$conf is invalid (see above); fix it and run this again"
else
    "$bin_dest" check -c "$conf" ||
        die "$conf is invalid (see above); fix it and run this again"
fi

# --- systemd --------------------------------------------------------------
if [ -n "$destdir" ] && [ -z "$systemctl" ]; then
    say "staged into $destdir: skipped user creation, chown and systemctl"
    exit 0
fi
if [ -z "$systemctl" ]; then
    if [ ! -d /run/systemd/system ]; then
        say "systemd is not running here (a container?): skipped systemctl;"
        say "start it as the service user: runuser -u $user -- $prefix/bin/pin-proxy run -c /etc/pin-proxy/config.yaml"
        exit 0
    fi
    systemctl=systemctl
fi

"$systemctl" daemon-reload
if [ "$fresh_config" -eq 1 ]; then
    # The example config names placeholder nodes: starting on it would only
    # mark them down. The operator edits it first.
    "$systemctl" enable pin-proxy
    say "enabled, not started: /etc/pin-proxy/config.yaml is the example config."
    say "edit its pools (listen, backends), check it with"
    say "  runuser -u $user -- $prefix/bin/pin-proxy check -c /etc/pin-proxy/config.yaml"
    say "then start it: systemctl start pin-proxy"
    exit 0
elif [ "$start" -eq 0 ]; then
    "$systemctl" enable pin-proxy
    say "enabled; start with: systemctl start pin-proxy"
elif "$systemctl" is-active --quiet pin-proxy && [ "$changed" -eq 1 ]; then
    "$systemctl" enable pin-proxy
    # A restart would close every client connection at once: hand them over.
    say "live upgrade: the running service hands its connections to the new binary"
    if "$bin_dest" upgrade -c "$conf"; then
        if [ "$unit_changed" -eq 1 ]; then
            say "the unit changed too: its new settings apply at the next restart"
        fi
    else
        say "the live upgrade failed (journalctl -u pin-proxy shows upgrade_failed and why);"
        say "the old process still serves every client. Fix the cause and run this again,"
        say "or apply the new build with a restart (clients redial): systemctl restart pin-proxy"
        exit 1
    fi
else
    "$systemctl" enable --now pin-proxy
fi
if [ "$start" -eq 1 ]; then
    "$systemctl" --no-pager --lines=0 status pin-proxy || true # only a report
    say "done; logs: journalctl -u pin-proxy -f"
fi
