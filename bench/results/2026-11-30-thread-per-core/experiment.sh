#!/usr/bin/env bash
# pp64: two single-thread pin-proxy processes sharing the port (SO_REUSEPORT) vs one 2-worker pin-proxy vs haproxy
set -e
cd /work/main
R=${R:-3}; T=${T:-5}
ulimit -n "$(ulimit -Hn)"
LG=target/loadgen/release/loadgen
read -r A1 A3 A4 A5 <<<"$($LG free-ports 4 | tr '\n' ' ')"
$LG echo-server --listen 127.0.0.1:$A1 >/dev/null 2>&1 & E1=$!
mk() { printf 'log: { level: warn, format: text }\ndefaults:\n  health: { probe: connect, interval: 1h }\npools:\n  - { name: echo, listen: 127.0.0.1:%s, backends: [ "127.0.0.1:%s" ] }\n' $1 $A1 > $2; }
mk $A3 /tmp/ab2a.yaml; mk $A4 /tmp/ab2b.yaml
printf 'global\n    nbthread 2\n    maxconn 9900\ndefaults\n    mode tcp\n    maxconn 9900\n    timeout connect 5s\n    timeout client 1h\n    timeout server 1h\nfrontend f\n    bind 127.0.0.1:%s\n    default_backend b\nbackend b\n    balance leastconn\n    server s1 127.0.0.1:%s\n' $A5 $A1 > /tmp/ab2.cfg
XREUSEPORT=1 TOKIO_WORKER_THREADS=1 /tmp/pin-rp run -c /tmp/ab2a.yaml >/tmp/ab2-p1.log 2>&1 & P1=$!
XREUSEPORT=1 TOKIO_WORKER_THREADS=1 /tmp/pin-rp run -c /tmp/ab2a.yaml >/tmp/ab2-p2.log 2>&1 & P2=$!
/tmp/pin-rp run -c /tmp/ab2b.yaml >/tmp/ab2-p3.log 2>&1 & P3=$!
haproxy -db -f /tmp/ab2.cfg >/tmp/ab2-ha.log 2>&1 & H=$!
sleep 1
for r in $(seq 1 $R); do
  for t in tpc pin ha; do
    case $t in tpc) port=$A3;; pin) port=$A4;; ha) port=$A5;; esac
    a=$($LG pingpong --target 127.0.0.1:$port --conns 64 --size 64 --duration $T --warmup 0.5 2>>/tmp/ab-lg.log | tail -1)
    echo "$t $(echo "$a" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["rps"]), d["p50_us"], d["p99_us"])')"
  done
done
kill $P1 $P2 $P3 $H $E1; wait 2>/dev/null || true
