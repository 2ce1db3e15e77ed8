#!/usr/bin/env bash
# ab2.sh ROUNDS SECS MODE TARGET...: like ../2026-12-03-smart-connect/ab.sh
# with a 1 s warm-up; a target may be "direct" (the echo servers setup.sh
# started; exactly one of each must run). Run from the repository root.
D=/tmp/sc; LG=bench/loadgen/target/release/loadgen
R=$1; S=$2; M=$3; shift 3
PE=$(pgrep -af "echo-server --listen" | grep -v close-first | sed 's/.*127.0.0.1:\([0-9]*\).*/\1/')
PC=$(pgrep -af "close-first" | sed 's/.*127.0.0.1:\([0-9]*\).*/\1/')
for r in $(seq "$R"); do
  for t in "$@"; do
    if [ "$t" = direct ]; then echo=$PE close=$PC; pid=(); else
    read -r _ echo close cmd < <(grep "^$t " "$D/ports"); pid=(--pid "$(pgrep -f "$cmd")"); fi
    if [ "$M" = cf ]; then args=(--target "127.0.0.1:$echo" --client-closes); else args=(--target "127.0.0.1:$close"); fi
    nice -n -10 "$LG" churn "${args[@]}" "${pid[@]}" --duration "$S" --warmup 1 |
      python3 -c "import json,sys; d=json.load(sys.stdin); print('$r $t', d['conn_per_s'], d.get('cpu_us_per_conn'), d['p99_us'])"
  done
done
