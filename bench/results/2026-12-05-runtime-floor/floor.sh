#!/usr/bin/env bash
# floor.sh ROUNDS SLICES SECS: churn through several proxies in one
# session, each once per slice of SECS seconds, the order rotated slice by
# slice, SLICES slices a round. Client first over two targets (as
# bench/run.sh's churn_cf), backend first over one (churn). Per round, the
# sums of conns and proxy CPU seconds; prints conn/s and CPU per connection
# of each, and each against HAProxy.
# The proxies (NAMES chooses, default "floor tfloor pin ha"; ha always):
#   floor   the minimal mio proxy of ./floor
#   tfloor  the same on tokio (FLOOR_TOKIO=1)
#   dfloor  floor taking each socket out of epoll before closing it
#           (FLOOR_DEREGISTER=1, as tokio does)
#   floor2  floor with FLOOR2_ENV (NAME=VALUE ...; FLOOR_KEEPALIVE=1 by default)
#   pin     pin-proxy, PIN (target/release/pin-proxy)
#   pin2    pin-proxy PIN2 (default PIN) with PIN2_ENV (NAME=VALUE ...) and
#           PIN2_EXTRA_POOLS idle pools beyond the three (0 by default)
#   ha      HAProxy, nbthread 2, as bench/run.sh configures it
# CF_TARGETS=1: client first over one target; MODES="cf" or "bf": one order
# only (both by default). The load tool runs at LOAD_NICE relative to the
# script (-10 by default: it outranks the proxies; bench/run.sh runs
# everything at one niceness, as `nice -n -10 env LOAD_NICE=0 floor.sh ...`
# does). Run from the repository root after building ./floor (cargo build
# --release there).
set -euo pipefail
R=${1:?rounds} K=${2:?slices} S=${3:?seconds}
# shellcheck source=bench/configs.sh
. bench/configs.sh
scratch
FLOOR=bench/results/2026-12-05-runtime-floor/floor/target/release/floor
ulimit -n 20000
EXTRA=${PIN2_EXTRA_POOLS:-0}
mapfile -t PORTS < <("$LG" free-ports $((24 + EXTRA)))
read -r E1 E2 C PE1 PE2 PC HE1 HE2 HC FE1 FE2 FC TE1 TE2 TC DE1 DE2 DC QE1 QE2 QC GE1 GE2 GC <<<"${PORTS[*]:0:24}"
# pin2's idle pools beyond the three (PIN2_EXTRA_POOLS), as bench/run.sh's
# pin-proxy has pools for loads that are not running.
MORE=()
for i in $(seq "$EXTRA"); do MORE+=("idle$i:${PORTS[$((23 + i))]}:$E1"); done
"$LG" echo-server --listen "127.0.0.1:$E1" >/dev/null 2>&1 &
"$LG" echo-server --listen "127.0.0.1:$E2" >/dev/null 2>&1 &
"$LG" echo-server --listen "127.0.0.1:$C" --close-first 64 >/dev/null 2>&1 &
pin_config "$D/pin.yaml" "$PIN" "echo:$PE1:$E1" "echo2:$PE2:$E2" "close:$PC:$C"
haproxy_config "$D/ha.cfg" 2 9000 "echo:$HE1:$E1" "echo2:$HE2:$E2" "close:$HC:$C"
start_proxies
pin_config "$D/pin2.yaml" "${PIN2:-$PIN}" "echo:$QE1:$E1" "echo2:$QE2:$E2" "close:$QC:$C" "${MORE[@]}"
read -r -a PIN2_ENV_ARGS <<<"${PIN2_ENV:-}"
env "${PIN2_ENV_ARGS[@]}" "${PIN2:-$PIN}" run -c "$D/pin2.yaml" >/dev/null 2>&1 &
PID_PIN2=$!
"$FLOOR" "127.0.0.1:$FE1=127.0.0.1:$E1" "127.0.0.1:$FE2=127.0.0.1:$E2" "127.0.0.1:$FC=127.0.0.1:$C" &
PID_FLOOR=$!
FLOOR_TOKIO=1 "$FLOOR" "127.0.0.1:$TE1=127.0.0.1:$E1" "127.0.0.1:$TE2=127.0.0.1:$E2" "127.0.0.1:$TC=127.0.0.1:$C" &
PID_TFLOOR=$!
FLOOR_DEREGISTER=1 "$FLOOR" "127.0.0.1:$DE1=127.0.0.1:$E1" "127.0.0.1:$DE2=127.0.0.1:$E2" "127.0.0.1:$DC=127.0.0.1:$C" &
PID_DFLOOR=$!
read -r -a FLOOR2_ENV_ARGS <<<"${FLOOR2_ENV:-FLOOR_KEEPALIVE=1}"
env "${FLOOR2_ENV_ARGS[@]}" "$FLOOR" "127.0.0.1:$GE1=127.0.0.1:$E1" "127.0.0.1:$GE2=127.0.0.1:$E2" "127.0.0.1:$GC=127.0.0.1:$C" &
PID_FLOOR2=$!
sleep 1.5
declare -A PID=([floor]=$PID_FLOOR [tfloor]=$PID_TFLOOR [dfloor]=$PID_DFLOOR [floor2]=$PID_FLOOR2 [pin]=$PID_PIN [pin2]=$PID_PIN2 [ha]=$PID_HA)
declare -A CF=([floor]="$FE1 $FE2" [tfloor]="$TE1 $TE2" [dfloor]="$DE1 $DE2" [floor2]="$GE1 $GE2" [pin]="$PE1 $PE2" [pin2]="$QE1 $QE2" [ha]="$HE1 $HE2")
declare -A BF=([floor]=$FC [tfloor]=$TC [dfloor]=$DC [floor2]=$GC [pin]=$PC [pin2]=$QC [ha]=$HC)
one() { # MODE TARGET -> "conns cpu_s"
  local args
  if [ "$1" = cf ]; then
    read -r a b <<<"${CF[$2]}"
    args=(--target "127.0.0.1:$a" --client-closes)
    [ "${CF_TARGETS:-2}" = 1 ] || args+=(--also-target "127.0.0.1:$b")
  else
    args=(--target "127.0.0.1:${BF[$2]}")
  fi
  nice -n "${LOAD_NICE:--10}" "$LG" churn "${args[@]}" --concurrency 32 --size 64 --pid "${PID[$2]}" \
    --duration "$S" --warmup 0.5 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(d['conns'], d.get('proxy_cpu_s', 0))"
}
read -r -a NAMES <<<"${NAMES:-floor tfloor pin ha}"
order() { # SLICE -> the names rotated by SLICE, reversed on odd slices
  local n=${#NAMES[@]} i out=()
  for i in $(seq 0 $((n - 1))); do out+=("${NAMES[$(( ($1 + i) % n ))]}"); done
  if [ $(($1 % 2)) = 1 ]; then for ((i = n - 1; i >= 0; i--)); do printf '%s ' "${out[$i]}"; done; else printf '%s ' "${out[@]}"; fi
}
for m in ${MODES:-cf bf}; do
  for r in $(seq "$R"); do
    declare -A N=() U=()
    for t in "${NAMES[@]}"; do N[$t]=0; U[$t]=0; done
    for k in $(seq "$K"); do
      for t in $(order $((r * K + k))); do
        read -r c u < <(one "$m" "$t")
        N[$t]=$(( ${N[$t]} + c )); U[$t]=$(python3 -c "print(${U[$t]} + $u)")
      done
    done
    args=()
    for t in "${NAMES[@]}"; do args+=("$t" "${N[$t]}" "${U[$t]}"); done
    python3 - "$m" "$r" "$K" "$S" "${args[@]}" <<'PY'
import sys
m, r, k, s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
a = sys.argv[5:]
d = {a[i]: (int(a[i + 1]), float(a[i + 2])) for i in range(0, len(a), 3)}
us = {t: 1e6 * u / n for t, (n, u) in d.items()}
nh, uh = d["ha"][0], us["ha"]
print(f"{m} round {r}: " + "; ".join(
    f"{t} {n / (k * s):.0f}/s {us[t]:.1f} us ({n / nh:.3f} / {us[t] / uh:.3f})" for t, (n, _) in d.items()))
PY
  done
done
