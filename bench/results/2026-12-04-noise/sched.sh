#!/usr/bin/env bash
# sched.sh TARGET: `perf sched record` over 4 s in the middle of an 8 s
# 64-connection ping-pong through TARGET (../2026-12-03-smart-connect/setup.sh);
# prints the run's figures and the longest scheduling delays per task. The
# recording stays in $D/sched-TARGET.data for `perf sched timehist -i`.
# Run from the repository root, as root.
D=${D:-/tmp/sc}; LG=${LG:-bench/loadgen/target/release/loadgen}
t=$1
read -r _ echo _ cmd < <(grep "^$t " "$D/ports"); pid=$(pgrep -f "$cmd")
nice -n -10 "$LG" pingpong --target "127.0.0.1:$echo" --conns 64 --size 64 --duration 8 --warmup 1 --pid "$pid" >"$D/sched-$t.json" &
sleep 3
perf sched record -o "$D/sched-$t.data" -- sleep 4 >/dev/null 2>&1
wait
python3 -c "import json; d=json.load(open('$D/sched-$t.json')); print('$t', d['rps'], d['p99_us'], d['p999_us'], d['max_us'])"
perf sched latency -i "$D/sched-$t.data" --sort max 2>/dev/null | head -8
