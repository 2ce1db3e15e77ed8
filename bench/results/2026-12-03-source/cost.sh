#!/usr/bin/env bash
# The per-connection cost of `source: client` (a transparent bind) beside
# `source: proxy`, in churn with the backend closing first: syscalls per
# connection (strace -c -f over exactly 3,200 connections) and the proxy's
# CPU per connection (ROUNDS rounds of 4 s, interleaved). Needs root (the
# transparent option), strace and release builds of pin-proxy and loadgen.
# Usage: bench/results/2026-12-03-source/cost.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROUNDS=${1:-5}
PX=target/release/pin-proxy
LG=${LG:-bench/loadgen/target/release/loadgen}
OUT=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

"$LG" echo-server --listen 127.0.0.1:19501 --close-first 64 >/dev/null &
pids+=($!)
wait_port 19501
declare -A PID_OF PORT_OF
port=19510
for src in proxy client; do
    port=$((port + 1))
    cat >"$OUT/$src.yaml" <<YAML
log: { level: warn }
pools:
  - name: p
    listen: 127.0.0.1:$port
    source: $src
    rebalance: { interval: 0s }
    health: { probe: connect, interval: 1h }
    backends: [127.0.0.1:19501]
YAML
    "$PX" run -c "$OUT/$src.yaml" >"$OUT/$src.log" 2>&1 &
    PID_OF[$src]=$!
    PORT_OF[$src]=$port
    pids+=($!)
    wait_port "$port"
done

echo "syscalls per connection (3,200 connections, backend closes first)"
for src in proxy client; do
    strace -c -f -q -p "${PID_OF[$src]}" -o "$OUT/strace-$src.txt" &
    st=$!
    sleep 0.5
    "$LG" churn --target "127.0.0.1:${PORT_OF[$src]}" --concurrency 32 --size 64 \
        --max-conns 100 --duration 60 --warmup 0 >/dev/null
    kill -INT "$st"
    wait "$st" || true
    total=$(awk '$NF == "total" { print $(NF-2) }' "$OUT/strace-$src.txt")
    echo "  source: $src  $(awk -v t="$total" 'BEGIN { printf "%.2f", t / 3200 }')"
    awk 'NR > 2 && $NF != "total" && $1 !~ /^-/ { printf "    %-12s %.2f\n", $NF, $4 / 3200 }' "$OUT/strace-$src.txt" | sort -k2 -nr | head -12
done

echo "CPU per connection, us (rounds of 4 s, interleaved)"
for r in $(seq "$ROUNDS"); do
    for src in proxy client; do
        "$LG" churn --target "127.0.0.1:${PORT_OF[$src]}" --concurrency 32 --size 64 \
            --duration 4 --warmup 0.5 --pid "${PID_OF[$src]}" \
            | python3 -c "import json,sys; d=json.load(sys.stdin); print('  round $r source: $src', round(d.get('conn_per_s', d.get('conns_per_s', 0))), 'conn/s', round(d['cpu_us_per_conn'], 1), 'us/conn')"
    done
done
