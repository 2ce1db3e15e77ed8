#!/usr/bin/env bash
# receivers.sh ROUNDS N SECS: N iperf3 servers, one single-stream client
# each, all at once (`loadgen iperf --also-target`), with no proxy,
# through pin-proxy splicing, pin-proxy copying (PIN_PROXY_SPLICE=off)
# and HAProxy in turn (one pool or frontend per server), ROUNDS times.
# Prints Gbit/s, the proxy's CPU s per GB and the whole machine's (every
# CPU's busy time in /proc/stat over the run, per GB received). The same
# configs as bench/run.sh. Run from the repository root; PIN=BIN (default
# target/release/pin-proxy).
set -euo pipefail
# shellcheck source=bench/configs.sh
. bench/configs.sh
scratch
R=$1 N=$2 T=$3
mapfile -t p < <("$LG" free-ports $((4 * N)))
srv=() splice=() copy=() ha=() specs=()
for k in $(seq 0 $((N - 1))); do
    s=${p[$((4 * k))]}
    iperf3 -s -B 127.0.0.1 -p "$s" >/dev/null 2>&1 &
    srv+=("$s") splice+=("${p[$((4 * k + 1))]}") copy+=("${p[$((4 * k + 2))]}") ha+=("${p[$((4 * k + 3))]}")
    specs+=("i$k:${p[$((4 * k + 1))]}:${p[$((4 * k + 2))]}:${p[$((4 * k + 3))]}:$s")
done
start_splice_copy_ha "${specs[@]}"
p_splice=$PID_PIN p_copy=$PID_COPY p_ha=$PID_HA
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
one() { # NAME PID PORT...
    local name=$1 pid=$2 b0 b1 args=() pids=()
    shift 2
    args=(--target "127.0.0.1:$1")
    for port in "${@:2}"; do args+=(--also-target "127.0.0.1:$port"); done
    [ "$pid" = 0 ] || pids=(--pid "$pid")
    b0=$(busy)
    out=$(nice -n -10 "$LG" iperf "${args[@]}" --streams 1 --time "$T" "${pids[@]}")
    b1=$(busy)
    python3 - "$name" "$out" "$((b1 - b0))" <<'PY'
import json, sys
name, out, ticks = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
gb = out["bytes"] / 1e9
proxy = out.get("cpu_s_per_gb")
print(f"{name:8s} {out['gbit_s']:6.2f} Gbit/s  proxy {proxy if proxy is not None else '-':>5} s/GB"
      f"  machine {ticks / 100 / gb:.3f} s/GB  ({out['clients']} clients)")
PY
}
for r in $(seq "$R"); do
    echo "round $r"
    one direct 0 "${srv[@]}"
    if [ $((r % 2)) = 1 ]; then
        one splice "$p_splice" "${splice[@]}"
        one copy "$p_copy" "${copy[@]}"
        one haproxy "$p_ha" "${ha[@]}"
    else
        one haproxy "$p_ha" "${ha[@]}"
        one copy "$p_copy" "${copy[@]}"
        one splice "$p_splice" "${splice[@]}"
    fi
done
