#!/usr/bin/env bash
# Experiment: pin-proxy's tokio worker count vs HAProxy, ping-pong and churn.
set -euo pipefail
cd /work/main
renice -n -10 -p $$ >/dev/null
ulimit -n "$(ulimit -Hn)"
L=target/loadgen/release/loadgen PIN=target/release/pin-proxy
OUT=bench/results/$(date -u +%Y-%m-%dT%H%M%SZ)-workers; mkdir -p "$OUT"
mapfile -t P < <($L free-ports 8)
E=${P[0]} C=${P[1]}
$L echo-server --listen 127.0.0.1:$E 2>/dev/null & EP=$!
$L echo-server --listen 127.0.0.1:$C --close-first 64 2>/dev/null & CP=$!
cfg() { printf 'log: { level: warn, format: text }\ndefaults:\n  max_connections: 20000\n  health: { probe: connect, interval: 1h }\npools:\n  - name: echo\n    listen: 127.0.0.1:%s\n    backends: [ "127.0.0.1:%s" ]\n  - name: close\n    listen: 127.0.0.1:%s\n    backends: [ "127.0.0.1:%s" ]\n' $1 $E $2 $C; }
cfg ${P[2]} ${P[3]} > /tmp/lgprof/p2.yaml; cfg ${P[4]} ${P[5]} > /tmp/lgprof/p1.yaml
printf 'global\n nbthread 2\n maxconn 9000\ndefaults\n mode tcp\n timeout connect 5s\n timeout client 1h\n timeout server 1h\nfrontend f\n bind 127.0.0.1:%s\n default_backend b\nbackend b\n balance leastconn\n server s1 127.0.0.1:%s\nfrontend f2\n bind 127.0.0.1:%s\n default_backend b2\nbackend b2\n balance leastconn\n server s1 127.0.0.1:%s\n' ${P[6]} $E ${P[7]} $C > /tmp/lgprof/h.cfg
$PIN run -c /tmp/lgprof/p2.yaml > $OUT/p2.log 2>&1 & W2=$!
TOKIO_WORKER_THREADS=1 $PIN run -c /tmp/lgprof/p1.yaml > $OUT/p1.log 2>&1 & W1=$!
haproxy -db -f /tmp/lgprof/h.cfg > $OUT/h.log 2>&1 & HA=$!
trap 'kill $EP $CP $W2 $W1 $HA 2>/dev/null' EXIT
sleep 1
echo "threads: pin2 $(ls /proc/$W2/task | wc -l) pin1 $(ls /proc/$W1/task | wc -l) ha $(ls /proc/$HA/task | wc -l)" >&2
for r in 1 2 3; do
  for t in "pin2:$W2:${P[2]}:${P[3]}" "pin1:$W1:${P[4]}:${P[5]}" "ha:$HA:${P[6]}:${P[7]}"; do
    IFS=: read name pid ep cp <<<"$t"
    taskset -a -cp 0 $EP >/dev/null; taskset -a -cp 0 $pid >/dev/null
    taskset -c 0 $L --tag r=$r --tag t=$name --tag c=pp1 pingpong --target 127.0.0.1:$ep --conns 1 --threads 1 --duration 5 --pid $pid 2>/dev/null
    taskset -a -cp 0-1 $EP >/dev/null; taskset -a -cp 0-1 $pid >/dev/null
    $L --tag r=$r --tag t=$name --tag c=pp64 pingpong --target 127.0.0.1:$ep --conns 64 --duration 5 --pid $pid 2>/dev/null
    $L --tag r=$r --tag t=$name --tag c=churn churn --target 127.0.0.1:$cp --duration 5 --pid $pid 2>/dev/null
  done
done > $OUT/results.jsonl
echo "$OUT"
