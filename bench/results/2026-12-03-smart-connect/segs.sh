#!/usr/bin/env bash
# segs.sh: TCP segments per churned connection through each target of
# setup.sh, both close orders: `nstat` deltas over exactly 3,200 connections
# (32 loops of 100, no warm-up), all segments on loopback counted once
# (client, proxy and echo server together). Active opens per connection
# (2: client → proxy, proxy → node) check that nothing else ran.
D=${D:-/tmp/sc}
LG=${LG:-bench/loadgen/target/release/loadgen}
N=3200
for m in cf bf; do
  for t in ${TARGETS:-new old ha ha-sc}; do
    read -r _ echo close _ < <(grep "^$t " "$D/ports")
    if [ "$m" = cf ]; then args=(--target "127.0.0.1:$echo" --client-closes); else args=(--target "127.0.0.1:$close"); fi
    nstat -n >/dev/null
    "$LG" churn "${args[@]}" --warmup 0 --max-conns $((N / 32)) --duration 60 >/dev/null 2>&1
    nstat -z TcpOutSegs TcpActiveOpens TcpExtTCPPureAcks |
      awk -v t="$t" -v m="$m" -v n=$N '{v[$1]=$2} END {printf "%s %s segments %.2f pure_acks %.2f active_opens %.2f\n", m, t, v["TcpOutSegs"]/n, v["TcpExtTCPPureAcks"]/n, v["TcpActiveOpens"]/n}'
  done
done
