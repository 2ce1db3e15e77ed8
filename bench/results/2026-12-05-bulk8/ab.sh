#!/usr/bin/env bash
# ab.sh ROUNDS STREAMS SECS: iperf3 (STREAMS parallel streams, SECS each)
# through pin-proxy as built (`splice(2)` for bulk), pin-proxy copying
# (PIN_PROXY_SPLICE=off) and HAProxy, in turn, ROUNDS times; with each
# run's Gbit/s and proxy CPU s per GB (the load tool), and `perf stat` of
# the iperf3 server and of the proxy over the run (system calls, context
# switches, CPU ms). The same configs as bench/run.sh. Run from the
# repository root; PIN=BIN (default target/release/pin-proxy).
set -euo pipefail
# shellcheck source=bench/configs.sh
. bench/configs.sh
scratch
R=$1 S=$2 T=$3
read -r P_SRV P_SPLICE P_COPY P_HA <<<"$("$LG" free-ports 4 | tr '\n' ' ')"
iperf3 -s -B 127.0.0.1 -p "$P_SRV" >/dev/null 2>&1 &
srv=$!
start_splice_copy_ha "iperf:$P_SPLICE:$P_COPY:$P_HA:$P_SRV"
splice=$PID_PIN copy=$PID_COPY ha=$PID_HA
stat() { # PID OUT: perf stat for the run's length less a second
    perf stat -x, -e raw_syscalls:sys_enter,context-switches,task-clock \
        -p "$1" -o "$2" -- sleep $((T - 1))
}
fields() { grep -v '^#' "$1" | grep . | cut -d, -f1 | tr '\n' ' '; }
echo "# round proxy Gbit/s proxy-CPU-s/GB | iperf3 server: syscalls switches CPU-ms | proxy: syscalls switches CPU-ms"
for r in $(seq "$R"); do
    for t in splice:$P_SPLICE:$splice copy:$P_COPY:$copy haproxy:$P_HA:$ha; do
        IFS=: read -r name port pid <<<"$t"
        stat "$srv" "$D/srv" &
        w1=$!
        stat "$pid" "$D/px" &
        w2=$!
        out=$(nice -n -10 "$LG" iperf --target "127.0.0.1:$port" --streams "$S" --time "$T" --pid "$pid" 2>/dev/null)
        wait "$w1" "$w2"
        g=$(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d['gbit_s'], d['cpu_s_per_gb'])" "$out")
        echo "$r $name $g | $(fields "$D/srv")| $(fields "$D/px")"
    done
done
