#!/usr/bin/env bash
# slice.sh ROUNDS SLICES SECS MODE A B: per round, SLICES pairs of SECS-s churn runs
# (0.5 s warm-up) in ABBA order; prints per-round A/B of conn/s and CPU/conn.
# Targets as started by ../2026-12-03-smart-connect/setup.sh; run from the
# repository root.
D=/tmp/sc; LG=bench/loadgen/target/release/loadgen
R=$1 K=$2 S=$3 M=$4 A=$5 B=$6
one() { # target -> "conns cpu_s"
  read -r _ echo close cmd < <(grep "^$1 " "$D/ports")
  if [ "$M" = cf ]; then args=(--target "127.0.0.1:$echo" --client-closes); else args=(--target "127.0.0.1:$close"); fi
  nice -n -10 "$LG" churn "${args[@]}" --pid "$(pgrep -f "$cmd")" --duration "$S" --warmup 0.5 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(d['conns'], d.get('proxy_cpu_s', 0))"
}
for r in $(seq "$R"); do
  declare -A C=() U=()
  for k in $(seq "$K"); do
    if [ $((k % 2)) = 1 ]; then o=("$A" "$B"); else o=("$B" "$A"); fi
    for t in "${o[@]}"; do read -r c u < <(one "$t"); C[$t]=$(( ${C[$t]:-0} + c )); U[$t]=$(python3 -c "print(${U[$t]:-0} + $u)"); done
  done
  python3 -c "
ca,cb,ua,ub=${C[$A]},${C[$B]},${U[$A]},${U[$B]}
print('$r $M conn/s %.3f cpu %.3f  (%d %d)' % (ca/cb, (ua/ca)/(ub/cb), ca, cb))"
done
