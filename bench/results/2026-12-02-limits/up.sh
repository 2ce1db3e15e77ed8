#!/usr/bin/env bash
# start backends + pin-proxy + haproxy on fixed ports for experiments
cd /work/main
ulimit -n $(ulimit -Hn)
LG=target/loadgen/release/loadgen
[ -x $LG ] || LG=$(ls bench/loadgen/target/release/loadgen 2>/dev/null)
PIN=${PIN:-target/release/pin-proxy}
pkill -f "iperf3 -s -B 127.0.0.1 -p 5201"; pkill -f "loadgen echo-server"; pkill -f "loadgen p2p-server"; pkill -x pin-proxy; pkill -x haproxy
sleep 0.5
iperf3 -s -B 127.0.0.1 -p 5201 >/tmp/exp/iperf-s.log 2>&1 &
$LG echo-server --listen 127.0.0.1:5301 >/tmp/exp/echo.log 2>&1 &
$LG p2p-server --listen 127.0.0.1:5401 >/tmp/exp/p2ps.log 2>&1 & echo $! > /tmp/exp/p2ps.pid
cat > /tmp/exp/pin.yaml <<Y
log: { level: warn, format: text }
defaults:
  max_connections: 20000
  health: { probe: connect, interval: 1h }
pools:
  - { name: iperf, listen: "127.0.0.1:6201", backends: [ "127.0.0.1:5201" ] }
  - { name: echo, listen: "127.0.0.1:6301", backends: [ "127.0.0.1:5301" ] }
  - { name: p2p, listen: "127.0.0.1:6401", backends: [ "127.0.0.1:5401" ] }
Y
cat > /tmp/exp/ha.cfg <<Y
global
    nbthread 2
    maxconn 9900
defaults
    mode tcp
    maxconn 9900
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend iperf
    bind 127.0.0.1:7201
    default_backend iperf
backend iperf
    balance leastconn
    server s1 127.0.0.1:5201
frontend echo
    bind 127.0.0.1:7301
    default_backend echo
backend echo
    balance leastconn
    server s1 127.0.0.1:5301
frontend p2p
    bind 127.0.0.1:7401
    default_backend p2p
backend p2p
    balance leastconn
    server s1 127.0.0.1:5401
Y
sleep 0.3
$PIN run -c /tmp/exp/pin.yaml >/tmp/exp/pin.log 2>&1 & echo $! > /tmp/exp/pin.pid
haproxy -db -f /tmp/exp/ha.cfg >/tmp/exp/ha.log 2>&1 & echo $! > /tmp/exp/ha.pid
sleep 1.5
echo up
