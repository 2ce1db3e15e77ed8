#!/usr/bin/env bash
# split.sh: where each proxy's CPU per churned connection goes, kernel or
# user space: client-first churn over one target through pin-proxy ($PIN),
# tfloor and floor (./floor, built), `perf record` on the proxy for 4 s of
# a 5 s run, samples split by DSO (perf slows every proxy alike: read the
# split, not the rate). Run from the repository root.
set -euo pipefail
# shellcheck source=bench/configs.sh
. bench/configs.sh
scratch
FLOOR=bench/results/2026-12-05-runtime-floor/floor/target/release/floor
ulimit -n 20000
read -r E PE TE FE <<<"$($LG free-ports 4 | tr '\n' ' ')"
"$LG" echo-server --listen "127.0.0.1:$E" >/dev/null 2>&1 &
pin_config "$D/pin.yaml" "$PIN" "echo:$PE:$E"
"$PIN" run -c "$D/pin.yaml" >/dev/null 2>&1 &
PID_PIN=$!
FLOOR_TOKIO=1 "$FLOOR" "127.0.0.1:$TE=127.0.0.1:$E" &
PID_TFLOOR=$!
"$FLOOR" "127.0.0.1:$FE=127.0.0.1:$E" &
PID_FLOOR=$!
sleep 1.5
for t in "pin $PE $PID_PIN" "tfloor $TE $PID_TFLOOR" "floor $FE $PID_FLOOR"; do
  read -r n port pid <<<"$t"
  perf record -g -o "$D/$n.data" -p "$pid" -- sleep 4 >/dev/null 2>&1 &
  rec=$!
  us=$(nice -n -10 "$LG" churn --target "127.0.0.1:$port" --client-closes --pid "$pid" --duration 5 --warmup 0.5 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(1e6 * d['proxy_cpu_s'] / d['conns'])")
  wait "$rec" || true
  perf report -i "$D/$n.data" --no-children --sort dso -g none --stdio 2>/dev/null |
    awk -v t="$n" -v us="$us" '/%/ && !/^#/ {p = $1; sub(/%/, "", p); if ($2 == "[kernel.kallsyms]") k += p; else u += p}
      END {printf "%-6s CPU %.1f us per connection: kernel %.1f, user space %.1f\n", t, us, us * k / 100, us * u / 100}'
done
