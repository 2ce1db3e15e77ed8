#!/usr/bin/env bash
# pp.sh ROUNDS TARGET...: 64-connection ping-pong (10 s + 1 s warm-up) through
# each target of ../2026-12-03-smart-connect/setup.sh in the order given, with
# each proxy thread's scheduler figures over the run (/proc/PID/task/*/schedstat
# and status): CPU, time waiting on a run queue, slices, context switches.
# Run from the repository root.
D=${D:-/tmp/sc}; LG=${LG:-bench/loadgen/target/release/loadgen}
R=$1; shift
snap() {
  local t
  for t in /proc/"$1"/task/*; do
    echo "$(basename "$t") $(tr ' ' _ <"$t/comm") $(cat "$t/schedstat") $(awk '/^voluntary/{v=$2}/^nonvoluntary/{n=$2}END{print v, n}' "$t/status")"
  done
}
for r in $(seq "$R"); do
  for t in "$@"; do
    read -r _ echo _ cmd < <(grep "^$t " "$D/ports"); pid=$(pgrep -f "$cmd")
    snap "$pid" >"$D/pp-before"
    out=$(nice -n -10 "$LG" pingpong --target "127.0.0.1:$echo" --conns 64 --size 64 --duration 10 --warmup 1 --pid "$pid")
    snap "$pid" >"$D/pp-after"
    echo "$out" | python3 -c "import json,sys; d=json.load(sys.stdin); print('$r $t', d['rps'], d['p99_us'], d['p999_us'], d.get('cpu_us_per_req'))"
    python3 - "$D/pp-before" "$D/pp-after" <<'PY'
import sys
b = {l.split()[0]: l.split() for l in open(sys.argv[1])}
for l in open(sys.argv[2]):
    a = l.split(); x = b.get(a[0])
    if not x:
        continue
    cpu, wait = (int(a[2]) - int(x[2])) / 1e6, (int(a[3]) - int(x[3])) / 1e6
    sl, vol, inv = int(a[4]) - int(x[4]), int(a[5]) - int(x[5]), int(a[6]) - int(x[6])
    if cpu >= 1:
        print(f"   {a[1]:16s} cpu {cpu:5.0f} ms  run-queue wait {wait:5.0f} ms  slices {sl:6d}  voluntary {vol:6d}  involuntary {inv:6d}")
PY
  done
done
