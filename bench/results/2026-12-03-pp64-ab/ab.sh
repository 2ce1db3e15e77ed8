#!/usr/bin/env bash
# 64-conn ping-pong, alternating pin-proxy binaries and HAProxy: ab.sh ROUNDS BIN... (from the repository root)
set -eu
# shellcheck source=bench/configs.sh
. bench/configs.sh
R=$1; shift
LG=${LG:-bench/loadgen/target/release/loadgen}
read -r PE <<<"$($LG free-ports 1 | tr '\n' ' ')"
$LG echo-server --listen 127.0.0.1:$PE >/dev/null 2>&1 & E=$!
for r in $(seq $R); do for B in "$@" haproxy; do
read -r PP <<<"$($LG free-ports 1 | tr '\n' ' ')"
if [ $B = haproxy ]; then
haproxy_config ha.cfg 2 9900 "echo:$PP:$PE"
haproxy -f ha.cfg -db >/dev/null 2>&1 & P=$!
else
pin_config pp.yaml "$B" "p:$PP:$PE"
$B run -c pp.yaml >/dev/null 2>&1 & P=$!
fi
sleep 0.7
$LG pingpong --target 127.0.0.1:$PP --conns 64 --duration 5 --warmup 1 --pid $P 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('$r', '$(basename $B)', d['rps'], d['p99_us'], d['p999_us'], d['cpu_us_per_req'])"
kill $P; wait $P 2>/dev/null || true
done; done
kill $E
