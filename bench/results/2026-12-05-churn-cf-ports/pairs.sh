#!/usr/bin/env bash
# pairs.sh ROUNDS SECS PAIRS: client-first churn (32 loops in all, 64 B)
# with no proxy, through pin-proxy and through HAProxy, split over PAIRS
# (listen port, echo port) pairs: one pool or frontend per pair, one
# `loadgen churn` of 32/PAIRS loops per pair, all at once. Prints the
# summed conn/s, the proxy's CPU per connection (/proc/PID/stat), and the
# largest p50 / p99 of the pairs. The proxies' order alternates by round.
# Run from the repository root; PIN=BIN (default target/release/pin-proxy).
set -euo pipefail
# shellcheck source=bench/configs.sh
. bench/configs.sh
scratch
R=$1 S=$2 K=$3
mapfile -t ports < <("$LG" free-ports $((3 * K)))
pools_pin=() pools_ha=() direct=() pin=() ha=()
for k in $(seq 0 $((K - 1))); do
    e=${ports[$((3 * k))]} p=${ports[$((3 * k + 1))]} h=${ports[$((3 * k + 2))]}
    "$LG" echo-server --listen "127.0.0.1:$e" >/dev/null 2>&1 &
    pools_pin+=("e$k:$p:$e") pools_ha+=("e$k:$h:$e") direct+=("$e") pin+=("$p") ha+=("$h")
done
pin_config "$D/pin.yaml" "$PIN" "${pools_pin[@]}"
haproxy_config "$D/ha.cfg" 2 9000 "${pools_ha[@]}"
start_proxies
ppid=$PID_PIN hpid=$PID_HA
sleep 1.5
cpu() { if [ "$1" = 0 ]; then echo 0; else awk '{print $14 + $15}' "/proc/$1/stat"; fi; }
one() { # NAME PID PORT...
    local name=$1 pid=$2 c0 c1 w=()
    shift 2
    c0=$(cpu "$pid")
    for p in "$@"; do
        nice -n -10 "$LG" churn --target "127.0.0.1:$p" --client-closes --concurrency $((32 / K)) \
            --size 64 --duration "$S" --warmup 0.5 >"$D/out-$p" 2>/dev/null &
        w+=($!)
    done
    wait "${w[@]}"
    c1=$(cpu "$pid")
    python3 - "$name" "$((c1 - c0))" "$S" "$D" "$@" <<'PY'
import json, sys
name, ticks, secs, d = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
outs = [json.load(open(f"{d}/out-{p}")) for p in sys.argv[5:]]
n = sum(o["conns"] for o in outs)
cpu = "%.1f" % (ticks * 1e4 / n) if ticks else "-"
print(name, "conn/s %.0f" % (n / secs), "proxy CPU us/conn", cpu,
      "p50 %.0f p99 %.0f" % (max(o["p50_us"] for o in outs), max(o["p99_us"] for o in outs)))
PY
}
for r in $(seq "$R"); do
    echo "round $r"
    one direct 0 "${direct[@]}"
    if [ $((r % 2)) = 1 ]; then
        one pin-proxy "$ppid" "${pin[@]}"
        one haproxy "$hpid" "${ha[@]}"
    else
        one haproxy "$hpid" "${ha[@]}"
        one pin-proxy "$ppid" "${pin[@]}"
    fi
done
