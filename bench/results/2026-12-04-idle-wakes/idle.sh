#!/usr/bin/env bash
# idle.sh BIN [SECS]: one pin-proxy with bench/configs.sh's pin_config (three
# pools in front of one echo server, probes hourly), left idle: its context
# switches over SECS (all threads, /proc/PID/task/*/status), then its
# syscalls over SECS more under `strace -c -f`. Run from the repository root.
set -euo pipefail
BIN=$1; S=${2:-30}; LG=${LG:-bench/loadgen/target/release/loadgen}; D=${D:-/tmp/idle-wakes}
mkdir -p "$D"
read -r P_E A B C <<<"$("$LG" free-ports 4 | tr '\n' ' ')"
"$LG" echo-server --listen "127.0.0.1:$P_E" >/dev/null 2>&1 </dev/null & E=$!
# shellcheck source=bench/configs.sh
. bench/configs.sh
pin_config "$D/idle.yaml" "$BIN" "a:$A:$P_E" "b:$B:$P_E" "c:$C:$P_E"
"$BIN" run -c "$D/idle.yaml" >"$D/idle.log" 2>&1 </dev/null & P=$!
sleep 2 # start-up probes done
cs() { cat /proc/"$P"/task/*/status | awk '/^voluntary_ctxt/ { v += $2 } /^nonvoluntary/ { n += $2 } END { print v + n }'; }
c0=$(cs); sleep "$S"; c1=$(cs)
sc=$(timeout "$S" strace -f -c -p "$P" 2>&1 | awk '/total/ { print $4 }' || true)
echo "$BIN: $((c1 - c0)) context switches in ${S} s; ${sc:-0} syscalls in ${S} s under strace"
kill "$P" "$E"
