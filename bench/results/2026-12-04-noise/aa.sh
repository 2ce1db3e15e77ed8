#!/usr/bin/env bash
# aa.sh ROUNDS A B: bench/run.sh's churn structure (10 s + 1 s warm-up, direct first,
# A and B alternating order per round, bf then cf) for two targets started by
# ../2026-12-03-smart-connect/setup.sh. Run from the repository root.
R=$1 A=$2 B=$3
for r in $(seq "$R"); do
  if [ $((r % 2)) = 1 ]; then o=(direct "$A" "$B"); else o=(direct "$B" "$A"); fi
  for m in bf cf; do "$(dirname "$0")/ab2.sh" 1 10 "$m" "${o[@]}" 2>/dev/null | sed "s/^1 /$r $m /"; done
done
