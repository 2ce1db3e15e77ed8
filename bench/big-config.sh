#!/usr/bin/env bash
# A big config: peak RSS and time to ready of `pin-proxy run` with many
# backends. Prints one Markdown table row per shape.
#
#   bench/big-config.sh                       # 60,000 backends: 1 pool, then 60 pools of 1,000
#   bench/big-config.sh --backends 20000 --pools 10
#   BIN=target/release/pin-proxy bench/big-config.sh
#
# Backends are loopback ports nothing listens on (connect probe: refused at
# once, so every first probe finishes within the run). The instance runs
# HOLD seconds after `ready` (default 5: the first probe round lands), then
# gets SIGTERM; peak RSS is `/usr/bin/time -v`'s maximum resident set size.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/pin-proxy}
HOLD=${HOLD:-5}
backends=60000
shapes=()
while [ $# -gt 0 ]; do
    case $1 in
        --backends) backends=$2; shift 2 ;;
        --pools) shapes+=("$2"); shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ ${#shapes[@]} -gt 0 ] || shapes=(1 60)
[ -x "$BIN" ] || cargo build --release --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One pool per listen port, backends 127.0.0.2:1.. spread over the pools.
generate() {
    local pools=$1 total=$2 out=$3
    python3 - "$pools" "$total" > "$out" <<'EOF'
import sys
pools, total = int(sys.argv[1]), int(sys.argv[2])
print('log: { level: "warn,pin_proxy::runtime::server=info", format: json }')
print("defaults:\n  health: { probe: connect, interval: 30s, timeout: 2s }")
print("pools:")
per = total // pools
n = 0
for p in range(pools):
    print(f"  - name: p{p}\n    listen: 127.0.0.1:0\n    backends:")
    for _ in range(per):
        n += 1
        port = 1 + n % 65000
        host = f"127.0.{2 + n // 65000}.{1 + (n // 250) % 250}"
        print(f"      - {{ name: b{n:06}, addr: {host}:{port} }}")
EOF
}

echo "| backends | pools | config MB | check s | ready s | RSS at ready MiB | peak RSS MiB | warnings |"
echo "|---:|---:|---:|---:|---:|---:|---:|---|"
for pools in "${shapes[@]}"; do
    cfg=$work/big-$pools.yaml
    generate "$pools" "$backends" "$cfg"
    mb=$(awk -v b="$(stat -c %s "$cfg")" 'BEGIN { printf "%.1f", b / 1e6 }')
    t0=$(date +%s.%N)
    "$BIN" check -c "$cfg" > /dev/null
    check=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    log=$work/run-$pools.log
    t0=$(date +%s.%N)
    /usr/bin/time -v -o "$work/time-$pools" "$BIN" run -c "$cfg" > "$log" 2>&1 &
    timer=$!
    until grep -q '"message":"ready"' "$log"; do
        kill -0 "$timer" 2> /dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.05
    done
    ready=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    pid=$(pgrep -P "$timer")
    at_ready=$(awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
    sleep "$HOLD"
    kill -TERM "$pid"
    wait "$timer" || true
    peak=$(awk -F': ' '/Maximum resident/ { printf "%.0f", $2 / 1024 }' "$work/time-$pools")
    warns=$( (grep -o '"level":"WARN","message":"[a-z_]*"' "$log" || true) | cut -d'"' -f8 | sort | uniq -c | awk '{ printf "%s%s ×%s", sep, $2, $1; sep = ", " }')
    echo "| $backends | $pools | $mb | $check | $ready | $at_ready | $peak | ${warns:-none} |"
done
