#!/usr/bin/env bash
# ab.sh ROUNDS SECS MODE(cf|bf): alternate the targets (TARGETS, default "pin pin2 ha"; pin2 is a second
# instance with PIN_PROXY_HANDOFF=off, started by hand) and print per round: conn/s, proxy CPU us per
# connection, p99 us. Needs setup.sh first (same D).
D=${D:-/tmp/pf}; . "$D/ports"
LG=${LG:-bench/loadgen/target/release/loadgen}
PP=$(pgrep -f "pin-proxy run -c $D/pin.yaml"); PP2=$(pgrep -f "pin-proxy run -c $D/pin2.yaml"); HP=$(pgrep -f "haproxy -db -f $D/")
R=${1:-3}; S=${2:-5}; M=${3:-cf}
for r in $(seq $R); do
  for t in ${TARGETS:-pin pin2 ha}; do
    case $t in pin) p=$PP; a=$PIN_ECHO; c=$PIN_CLOSE;; pin2) p=$PP2; a=$PIN2_ECHO; c=$PIN2_CLOSE;; ha) p=$HP; a=$HA_ECHO; c=$HA_CLOSE;; esac
    if [ $M = cf ]; then args=(--target "127.0.0.1:$a" --client-closes); else args=(--target "127.0.0.1:$c"); fi
    nice -n -10 $LG churn "${args[@]}" --pid $p --duration $S | python3 -c "import json,sys; d=json.load(sys.stdin); print('$r $t', d['conn_per_s'], d['cpu_us_per_conn'], d['p99_us'])"
  done
done
