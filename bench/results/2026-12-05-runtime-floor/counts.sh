#!/usr/bin/env bash
# counts.sh: per churned connection, for pin-proxy ($PIN), tfloor and floor
# (./floor, built): TCP segments on loopback (`nstat`, client, proxy and
# echo server together) in both close orders, then the proxy's system calls
# (`strace -c -f`) client first; 3,200 connections each (32 loops of 100),
# one target. Run from the repository root.
set -euo pipefail
# shellcheck source=bench/configs.sh
. bench/configs.sh
scratch
FLOOR=bench/results/2026-12-05-runtime-floor/floor/target/release/floor
N=3200
ulimit -n 20000
read -r E C PE PC TE TC FE FC <<<"$($LG free-ports 8 | tr '\n' ' ')"
"$LG" echo-server --listen "127.0.0.1:$E" >/dev/null 2>&1 &
"$LG" echo-server --listen "127.0.0.1:$C" --close-first 64 >/dev/null 2>&1 &
pin_config "$D/pin.yaml" "$PIN" "echo:$PE:$E" "close:$PC:$C"
"$PIN" run -c "$D/pin.yaml" >/dev/null 2>&1 &
PID_PIN=$!
FLOOR_TOKIO=1 "$FLOOR" "127.0.0.1:$TE=127.0.0.1:$E" "127.0.0.1:$TC=127.0.0.1:$C" &
PID_TFLOOR=$!
"$FLOOR" "127.0.0.1:$FE=127.0.0.1:$E" "127.0.0.1:$FC=127.0.0.1:$C" &
PID_FLOOR=$!
sleep 1.5
churn() { # MODE ECHO_PORT CLOSE_PORT
  local args
  if [ "$1" = cf ]; then args=(--target "127.0.0.1:$2" --client-closes); else args=(--target "127.0.0.1:$3"); fi
  "$LG" churn "${args[@]}" --warmup 0 --max-conns $((N / 32)) --duration 60 >/dev/null 2>&1
}
for m in cf bf; do
  for t in "pin $PE $PC" "tfloor $TE $TC" "floor $FE $FC"; do
    read -r n e c <<<"$t"
    nstat -n >/dev/null
    churn "$m" "$e" "$c"
    nstat -z TcpOutSegs TcpExtTCPPureAcks |
      awk -v t="$n" -v m="$m" -v n=$N '{v[$1]=$2} END {printf "segments %s %-6s %.2f (pure ACKs %.2f)\n", m, t, v["TcpOutSegs"]/n, v["TcpExtTCPPureAcks"]/n}'
  done
done
for t in "pin $PE $PID_PIN" "tfloor $TE $PID_TFLOOR" "floor $FE $PID_FLOOR"; do
  read -r n e pid <<<"$t"
  strace -c -f -p "$pid" -o "$D/$n.strace" &
  s=$!
  sleep 1
  churn cf "$e" -
  kill -INT "$s"
  wait "$s" || true
  awk -v t="$n" -v n=$N '$4 ~ /^[0-9]+$/ && $NF != "total" {c[$NF] = $4; s += $4}
    END {printf "syscalls cf %-6s %.2f:", t, s / n; for (k in c) if (c[k] / n >= 0.01) printf " %s %.2f", k, c[k] / n; print ""}' "$D/$n.strace"
done
