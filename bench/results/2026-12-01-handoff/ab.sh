#!/usr/bin/env bash
# A/B/HAProxy: pp64 and churn; binaries in $A and $B; R rounds of T s
cd "$(dirname "$0")/../../.."
R=${R:-3}; T=${T:-3}
ulimit -n "$(ulimit -Hn)"
LG=target/loadgen/release/loadgen
read -r E1p E2p PA1 PA2 PB1 PB2 H1 H2 <<<"$($LG free-ports 8 | tr '\n' ' ')"
$LG echo-server --listen 127.0.0.1:$E1p >/dev/null 2>&1 & E1=$!
$LG echo-server --listen 127.0.0.1:$E2p --close-first 64 >/dev/null 2>&1 & E2=$!
mk() { cat <<Y
log: { level: warn, format: text }
defaults:
  max_connections: 20000
  health: { probe: connect, interval: 1h }
pools:
  - { name: echo, listen: 127.0.0.1:$1, backends: [ "127.0.0.1:$E1p" ] }
  - { name: close, listen: 127.0.0.1:$2, backends: [ "127.0.0.1:$E2p" ] }
Y
}
mk $PA1 $PA2 > /tmp/ab3a.yaml; mk $PB1 $PB2 > /tmp/ab3b.yaml
cat > /tmp/ab3.cfg <<Y
global
    nbthread 2
    maxconn 9900
defaults
    mode tcp
    maxconn 9900
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend echo
    bind 127.0.0.1:$H1
    default_backend echo
backend echo
    balance leastconn
    server s1 127.0.0.1:$E1p
frontend close
    bind 127.0.0.1:$H2
    default_backend close
backend close
    balance leastconn
    server s1 127.0.0.1:$E2p
Y
$A run -c /tmp/ab3a.yaml >/tmp/ab3a.log 2>&1 & PA=$!
$B run -c /tmp/ab3b.yaml >/tmp/ab3b.log 2>&1 & PB=$!
haproxy -db -f /tmp/ab3.cfg >/tmp/ab3-ha.log 2>&1 & H=$!
sleep 1
for r in $(seq 1 $R); do
  for t in A B ha; do
    case $t in A) pid=$PA; pe=$PA1; pc=$PA2;; B) pid=$PB; pe=$PB1; pc=$PB2;; ha) pid=$H; pe=$H1; pc=$H2;; esac
    a='{}'; [ -n "$NOPP" ] || a=$($LG pingpong --target 127.0.0.1:$pe --conns 64 --size 64 --duration $T --warmup 0.5 --pid $pid 2>>/tmp/ab3-lg.log | tail -1)
    b='{}'; [ -n "$NOCHURN" ] || b=$($LG churn --target 127.0.0.1:$pc --concurrency 32 --size 64 --duration $T --warmup 0.5 --pid $pid 2>>/tmp/ab3-lg.log | tail -1)
    python3 - "$t" "$a" "$b" <<'P'
import json,sys
t,a,b=sys.argv[1],json.loads(sys.argv[2]),json.loads(sys.argv[3])
print("%-3s pp64 rps %6s p99 %6s cpu/req %5s | churn conn/s %5s cpu/conn %5s" % (t, round(a.get("rps",0)), a.get("p99_us"), a.get("cpu_us_per_req"), round(b.get("conn_per_s",0)), b.get("cpu_us_per_conn")))
P
  done
done
kill $PA $PB $H $E1 $E2; wait 2>/dev/null
