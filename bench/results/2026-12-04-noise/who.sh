#!/usr/bin/env bash
# who.sh ROUNDS MODE TARGET...: churn (cf: client closes first, bf: backend
# first; 32 at a time, 5 s) through each target of
# ../2026-12-03-smart-connect/setup.sh, with the CPU per connection of the
# proxy and the echo server (/proc/PID/stat around the run), of the load
# tool (its own user + system time) and of the whole machine (/proc/stat).
# Run from the repository root.
D=${D:-/tmp/sc}; LG=${LG:-bench/loadgen/target/release/loadgen}
R=$1; M=$2; shift 2
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
all() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
for r in $(seq "$R"); do
  for t in "$@"; do
    read -r _ echo close cmd < <(grep "^$t " "$D/ports"); pid=$(pgrep -f "$cmd")
    if [ "$M" = cf ]; then
      args=(--target "127.0.0.1:$echo" --client-closes)
      e=$(pgrep -af "echo-server --listen" | grep -v close-first | cut -d' ' -f1)
    else
      args=(--target "127.0.0.1:$close")
      e=$(pgrep -f "close-first")
    fi
    p0=$(cpu "$pid"); e0=$(cpu "$e"); s0=$(all)
    out=$({ /usr/bin/time -f "LGCPU %U %S" nice -n -10 "$LG" churn "${args[@]}" --concurrency 32 --size 64 --duration 5 --warmup 0; } 2>&1)
    p1=$(cpu "$pid"); e1=$(cpu "$e"); s1=$(all)
    echo "$out" | python3 -c "
import json, sys
lines = sys.stdin.read().splitlines()
d = json.loads([l for l in lines if l.startswith('{')][0])
u, s = [float(x) for x in [l for l in lines if l.startswith('LGCPU')][0].split()[1:]]
n, tick = d['conns'], 1e6 / 100
print('$r $t conn/s', d['conn_per_s'], 'us/conn proxy %.1f echo %.1f loadgen %.1f machine %.1f' % (($p1 - $p0) * tick / n, ($e1 - $e0) * tick / n, (u + s) * 1e6 / n, ($s1 - $s0) * tick / n))"
  done
done
