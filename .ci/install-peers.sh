#!/usr/bin/env bash
# Install the real peers the end-to-end tests drive: litecoind (Litecoin Core,
# with litecoin-cli) now, haproxy and iperf3 for comparisons and load tests,
# dnsmasq-base (the dnsmasq binary alone, no service) for backends from DNS,
# prometheus for promtool (the alert rules), dpkg-dev and shellcheck for the
# Debian package, chromium (run headless) for the status page, and
# `electrumx`: ElectrumX (pip package e-x, with plyvel for LevelDB) in a
# venv at /opt/electrumx, where the tests look for electrumx_server.
#
# Idempotent: does nothing (and touches no package index) when every package
# is already installed. Non-interactive. Runs as root, or through sudo.
#
# Usage: .ci/install-peers.sh [PACKAGE...]   (default: litecoind haproxy iperf3)
set -euo pipefail

# The ElectrumX venv and what goes into it.
electrumx_venv=/opt/electrumx
electrumx_pip=(e-x==2.0.0 plyvel==1.5.1)

packages=()
electrumx=0
for pkg in "$@"; do
    if [ "$pkg" = electrumx ]; then
        electrumx=1
    else
        packages+=("$pkg")
    fi
done
if [ $# -eq 0 ]; then
    packages=(litecoind haproxy iperf3)
fi

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

need_electrumx=0
if [ "$electrumx" -eq 1 ] && [ ! -x "$electrumx_venv/bin/electrumx_server" ]; then
    need_electrumx=1
    # venv and pip for Debian's python3.
    packages+=(python3 python3-venv)
fi

missing=()
for pkg in "${packages[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ] && [ "$need_electrumx" -eq 0 ]; then
    requested=("${packages[@]}")
    [ "$electrumx" -eq 0 ] || requested+=(electrumx)
    echo "install-peers: already installed: ${requested[*]}"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo -n)
else
    echo "install-peers: need root or sudo to install: ${missing[*]}$([ "$need_electrumx" -eq 0 ] || echo " electrumx")" >&2
    exit 1
fi

if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-peers: apt-get not found; install by hand: ${missing[*]}" >&2
        exit 1
    fi
    echo "install-peers: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${missing[@]}"
fi

if [ "$need_electrumx" -eq 1 ]; then
    echo "install-peers: installing ${electrumx_pip[*]} into $electrumx_venv"
    # A venv left half made by a failed run is made again.
    "${as_root[@]}" rm -rf "$electrumx_venv"
    "${as_root[@]}" python3 -m venv "$electrumx_venv"
    "${as_root[@]}" "$electrumx_venv/bin/pip" install -q "${electrumx_pip[@]}"
    [ -x "$electrumx_venv/bin/electrumx_server" ] || {
        echo "install-peers: $electrumx_venv/bin/electrumx_server missing after pip install" >&2
        exit 1
    }
fi

# Tests start their own instances on loopback ports (haproxy) or only use
# the package's tools (promtool from prometheus); a packaged service left
# running would only get in the way. Without systemd, the package's init
# script may have started it (unless policy-rc.d forbade it).
for service in haproxy prometheus; do
    [[ " ${missing[*]} " == *" $service "* ]] || continue
    if [ -d /run/systemd/system ]; then
        "${as_root[@]}" systemctl disable --now "$service" >/dev/null 2>&1 ||
            echo "install-peers: could not stop the $service service (ignored)" >&2
    elif [ -x "/etc/init.d/$service" ]; then
        "${as_root[@]}" "/etc/init.d/$service" stop >/dev/null 2>&1 || true # not running
    fi
done

for pkg in "${missing[@]}"; do
    if ! installed "$pkg"; then
        echo "install-peers: $pkg did not install" >&2
        exit 1
    fi
done
if [[ " ${packages[*]} " == *" litecoind "* ]]; then
    command -v litecoind >/dev/null && command -v litecoin-cli >/dev/null || {
        echo "install-peers: litecoind installed but litecoind/litecoin-cli not on PATH" >&2
        exit 1
    }
fi
if [[ " ${packages[*]} " == *" chromium "* ]]; then
    command -v chromium >/dev/null || {
        echo "install-peers: chromium installed but not on PATH" >&2
        exit 1
    }
fi
if [[ " ${packages[*]} " == *" dnsmasq-base "* ]]; then
    # Debian installs it in /usr/sbin, often not on a user's PATH; the tests
    # look there too.
    [ -x /usr/sbin/dnsmasq ] || command -v dnsmasq >/dev/null || {
        echo "install-peers: dnsmasq-base installed but no dnsmasq in /usr/sbin or on PATH" >&2
        exit 1
    }
fi
if [[ " ${packages[*]} " == *" prometheus "* ]]; then
    command -v promtool >/dev/null || {
        echo "install-peers: prometheus installed but no promtool on PATH" >&2
        exit 1
    }
fi
echo "install-peers: done"
