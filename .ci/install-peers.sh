#!/usr/bin/env bash
# Install the real peers the end-to-end tests drive: litecoind (Litecoin Core,
# with litecoin-cli) now, haproxy and iperf3 for comparisons and load tests,
# dnsmasq-base (the dnsmasq binary alone, no service) for backends from DNS,
# chromium (run headless) for the status page.
#
# Idempotent: does nothing (and touches no package index) when every package
# is already installed. Non-interactive. Runs as root, or through sudo.
#
# Usage: .ci/install-peers.sh [PACKAGE...]   (default: litecoind haproxy iperf3)
set -euo pipefail

packages=("$@")
if [ ${#packages[@]} -eq 0 ]; then
    packages=(litecoind haproxy iperf3)
fi

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

missing=()
for pkg in "${packages[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-peers: already installed: ${packages[*]}"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo -n)
else
    echo "install-peers: need root or sudo to install: ${missing[*]}" >&2
    exit 1
fi

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

# Tests start their own instances on loopback ports; a packaged haproxy
# service left running on a systemd host would only get in the way.
if [[ " ${missing[*]} " == *" haproxy "* ]] && [ -d /run/systemd/system ]; then
    "${as_root[@]}" systemctl disable --now haproxy >/dev/null 2>&1 ||
        echo "install-peers: could not stop the haproxy service (ignored)" >&2
fi

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
echo "install-peers: done"
