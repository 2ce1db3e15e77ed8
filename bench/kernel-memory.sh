#!/usr/bin/env bash
# Kernel memory of idle proxied connections: how much the kernel's slab grows
# while N idle connections are held through pin-proxy (4 sockets each on one
# machine: client, pin-proxy's two, backend). Usage: N=9850 bench/kernel-memory.sh
# Needs the release builds that bench/run.sh makes. Loopback only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${N:-9850}
LG=target/loadgen/release/loadgen
CFG=$(mktemp) OUT=$(mktemp)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -f "$CFG" "$OUT"
}
trap cleanup EXIT
ulimit -n 20000
read -r -a PORTS <<<"$("$LG" free-ports 2 | tr '\n' ' ')"
"$LG" echo-server --listen "127.0.0.1:${PORTS[0]}" & PIDS+=($!)
cat >"$CFG" <<YAML
log: { level: warn, format: text }
pools:
  - name: idle
    listen: 127.0.0.1:${PORTS[1]}
    max_connections: 20000
    health: { probe: connect, interval: 1h }
    backends:
      - { name: echo, addr: 127.0.0.1:${PORTS[0]} }
YAML
target/release/pin-proxy run -c "$CFG" & P=$!
PIDS+=("$P")
# Wait until the pool accepts (at most 10 s).
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/${PORTS[1]}") 2>/dev/null && break
    sleep 0.1
done
slab() { awk '/^Slab:/{print $2}' /proc/meminfo; }
base=$(slab)
echo "slab before: $base KiB"
"$LG" idle --target "127.0.0.1:${PORTS[1]}" --count "$N" --pid "$P" --hold 6 >"$OUT" &
L=$!
max=$base
while kill -0 "$L" 2>/dev/null; do
    s=$(slab)
    [ "$s" -gt "$max" ] && max=$s
    sleep 0.5
done
wait "$L"
cat "$OUT"
echo "slab max: $max KiB, +$((max - base)) KiB for $N connections"
awk -v d=$((max - base)) -v n="$N" 'BEGIN {
    printf "per socket: %.2f KiB; pin-proxy'"'"'s two per connection: %.2f KiB\n", d / (4 * n), d / (2 * n)
}'
