#!/usr/bin/env bash
# p2p.sh ROUNDS CONNS SECS BIN...: the P2P-shaped load (loadgen p2p) through each pin-proxy binary and
# HAProxy in turn, in front of one p2p-server; prints CPU of proxy, client and backend, round trips and
# TCP segments per message (nstat: needs a machine with no other TCP traffic). Run from the repository root.
set -u
# shellcheck source=bench/configs.sh
. bench/configs.sh
R=$1 N=$2 S=$3; shift 3
LG=${LG:-bench/loadgen/target/release/loadgen}
D=${D:-/tmp/pf}/p2p; mkdir -p $D
ulimit -n 20000
read -r PS <<<"$($LG free-ports 1 | tr '\n' ' ')"
$LG p2p-server --listen 127.0.0.1:$PS >/dev/null 2>&1 & SP=$!
sleep 0.5
for r in $(seq $R); do for B in "$@" haproxy; do
  read -r PP <<<"$($LG free-ports 1 | tr '\n' ' ')"
  if [ $B = haproxy ]; then
    haproxy_config "$D/ha.cfg" 2 9900 "p:$PP:$PS"
    haproxy -f $D/ha.cfg -db >/dev/null 2>&1 & P=$!
  else
    pin_config "$D/pin.yaml" "$B" "p:$PP:$PS"
    $B run -c $D/pin.yaml >/dev/null 2>&1 & P=$!
  fi
  sleep 0.7
  nstat -n
  nice -n -10 $LG p2p --target 127.0.0.1:$PP --conns $N --secs $S --ramp 1000 --server-pid $SP --pid $P > $D/out.json 2>$D/err.txt
  segs=$(nstat | awk '/TcpOutSegs/{print $2}')
  python3 - "$r" "$(basename $B)" "$segs" "$D/out.json" <<'PY'
import json,sys
d=json.load(open(sys.argv[4]))
print(sys.argv[1], sys.argv[2], 'segs/msg %.2f' % (int(sys.argv[3])/max(1,d['sent']+d['echoed']+d['announced'])), ' '.join('%s=%s' % (k, d[k]) for k in ('proxy_cpu_pct','client_cpu_pct','server_cpu_pct','rtt_p50_us','rtt_p99_us','rtt_p999_us','msgs_per_s')))
PY
  kill $P; wait $P 2>/dev/null
done; done
kill $SP
