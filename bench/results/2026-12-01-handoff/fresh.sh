#!/usr/bin/env bash
# alternating fresh-start pp64 runs of binaries $A and $B (and haproxy if HA=1), N times
cd "$(dirname "$0")/../../.."
ulimit -n "$(ulimit -Hn)"
LG=target/loadgen/release/loadgen
N=${N:-8}
read -r A1 A2 A3 <<<"$($LG free-ports 3 | tr '\n' ' ')"
$LG echo-server --listen 127.0.0.1:$A1 >/dev/null 2>&1 & E=$!
cat > /tmp/alt.yaml <<Y
log: { level: warn, format: text }
defaults:
  max_connections: 20000
  health: { probe: connect, interval: 1h }
pools:
  - { name: echo, listen: 127.0.0.1:$A2, backends: [ "127.0.0.1:$A1" ] }
Y
cat > /tmp/alt.cfg <<Y
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
    bind 127.0.0.1:$A3
    default_backend echo
backend echo
    balance leastconn
    server s1 127.0.0.1:$A1
Y
targets="A B"; [ -n "$HA" ] && targets="A B ha"
for i in $(seq 1 $N); do
  for t in $targets; do
    case $t in
      A) $A run -c /tmp/alt.yaml >/dev/null 2>&1 & P=$!; port=$A2;;
      B) $B run -c /tmp/alt.yaml >/dev/null 2>&1 & P=$!; port=$A2;;
      ha) haproxy -db -f /tmp/alt.cfg >/dev/null 2>&1 & P=$!; port=$A3;;
    esac
    sleep 0.7
    out=$($LG pingpong --target 127.0.0.1:$port --conns 64 --size 64 --duration ${T:-3} --warmup 0.5 --pid $P 2>/dev/null | tail -1)
    echo "$t $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["rps"], d["p99_us"], d["cpu_us_per_req"])')"
    kill $P; wait $P 2>/dev/null
  done
done
kill $E
