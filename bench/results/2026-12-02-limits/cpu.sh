#!/usr/bin/env bash
# usage: cpu.sh PORT SECS [streams]: cpu seconds of iperf client, server, proxies, ksoftirqd over the run
port=$1; secs=$2; P=${3:-1}
cpu() { awk '{print $14+$15}' /proc/$1/stat 2>/dev/null || echo 0; }
srv=$(pgrep -f "iperf3 -s -B 127.0.0.1 -p 5201")
pin=$(cat /tmp/exp/pin.pid); ha=$(cat /tmp/exp/ha.pid)
ks=$(pgrep ksoftirqd | tr '\n' ' ')
declare -A a
for p in $srv $pin $ha $ks; do a[$p]=$(cpu $p); done
iperf3 -c 127.0.0.1 -p $port -t $secs -P $P -J > /tmp/exp/c.json &
cl=$!
sleep 0.2; clp=$(pgrep -f "iperf3 -c 127.0.0.1 -p $port"); c0=$(cpu $clp)
# sample client cpu just before exit
while kill -0 $cl 2>/dev/null; do c1=$(cpu $clp); sleep 0.1; done
tk=$(getconf CLK_TCK)
g=$(python3 -c "import json; d=json.load(open('/tmp/exp/c.json')); print(round(d['end']['sum_received']['bits_per_second']/1e9,2))")
out="port $port Gbit/s $g  client $(( (c1-c0) ))"
for p in $srv $pin $ha; do out="$out $p:$(( $(cpu $p) - ${a[$p]} ))"; done
ksum=0; for p in $ks; do ksum=$((ksum + $(cpu $p) - ${a[$p]})); done
echo "$out ksoftirqd:$ksum (ticks of 1/$tk s)"
