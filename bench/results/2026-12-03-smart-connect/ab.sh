#!/usr/bin/env bash
# ab.sh ROUNDS SECS MODE(cf|bf): rounds of SECS s of `loadgen churn` at nice -10,
# alternating the targets of setup.sh (TARGETS, default "new old ha ha-sc"); one
# line per round and target: conn/s, proxy CPU us per connection, p99 us.
D=${D:-/tmp/sc}
LG=${LG:-bench/loadgen/target/release/loadgen}
R=${1:-3}; S=${2:-5}; M=${3:-cf}
for r in $(seq "$R"); do
  for t in ${TARGETS:-new old ha ha-sc}; do
    read -r _ echo close cmd < <(grep "^$t " "$D/ports")
    pid=$(pgrep -f "$cmd")
    if [ "$M" = cf ]; then args=(--target "127.0.0.1:$echo" --client-closes); else args=(--target "127.0.0.1:$close"); fi
    nice -n -10 "$LG" churn "${args[@]}" --pid "$pid" --duration "$S" |
      python3 -c "import json,sys; d=json.load(sys.stdin); print('$r $t', d['conn_per_s'], d['cpu_us_per_conn'], d['p99_us'])"
  done
done
