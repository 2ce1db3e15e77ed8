#!/usr/bin/env bash
# Syscalls per churned connection, pin-proxy beside HAProxy, both close
# orders: `strace -c -f` on each proxy over exactly CONNS connections
# (`loadgen churn`, 32 loops of CONNS/32, 64 B echoed, then the backend
# closes first, or the client does). A count, not a time: it does not move
# with the machine's noise (strace slows both proxies alike; read the
# counts, not the rates), except the wake-ups (`epoll_wait`, `write` to
# wake another loop), which follow the timing by a few tenths of a call:
# so each count is taken REPEAT times (SYSCALLS_REPEAT, default 3) and the
# verdict is on the median run.
# Usage: bench/syscalls.sh PIN_PROXY LOADGEN [CONNS]   (needs strace, haproxy)
# Prints a Markdown table; with SYSCALLS_RAW=DIR keeps each strace summary.
set -euo pipefail
PIN=${1:?pin-proxy binary} LG=${2:?loadgen binary} CONNS=${3:-3200}
REPEAT=${SYSCALLS_REPEAT:-3}
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "syscalls.sh: SYSCALLS_REPEAT must be a positive count" >&2; exit 1; }
LOOPS=32
PER_LOOP=$((CONNS / LOOPS))
CONNS=$((PER_LOOP * LOOPS))
TMP=$(mktemp -d)
RAW=${SYSCALLS_RAW:-$TMP}
mkdir -p "$RAW"
PIDS=()
ulimit -n "$(ulimit -Hn)"
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

for tool in strace haproxy python3; do
    command -v "$tool" >/dev/null || { echo "syscalls.sh: $tool not found" >&2; exit 1; }
done

# Wait (bounded) until something listens on 127.0.0.1:PORT.
wait_listen() {
    local hex
    hex=$(printf '%04X' "$1")
    for _ in $(seq 100); do
        awk -v p=":$hex\$" '$2 ~ p && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp && return 0
        sleep 0.1
    done
    echo "syscalls.sh: nothing listens on port $1" >&2
    tail -n 5 "$TMP"/*.log >&2 2>/dev/null || true
    return 1
}

# Wait (bounded) until every thread of PID is traced.
wait_traced() {
    local pid=$1 status untraced
    for _ in $(seq 100); do
        untraced=0
        for status in /proc/"$pid"/task/*/status; do
            [ "$(awk '/^TracerPid:/ { print $2 }' "$status")" != 0 ] || untraced=1
        done
        [ "$untraced" = 0 ] && return 0
        sleep 0.05
    done
    echo "syscalls.sh: strace never attached to $pid" >&2
    return 1
}

mapfile -t ports < <("$LG" free-ports 6)
read -r P_ECHO P_CLOSE PIN_ECHO PIN_CLOSE HA_ECHO HA_CLOSE <<<"${ports[*]}"
"$LG" echo-server --listen "127.0.0.1:$P_ECHO" >/dev/null 2>&1 &
PIDS+=($!)
"$LG" echo-server --listen "127.0.0.1:$P_CLOSE" --close-first 64 >/dev/null 2>&1 &
PIDS+=($!)
wait_listen "$P_ECHO"
wait_listen "$P_CLOSE"

# shellcheck source=bench/configs.sh
. "$(dirname "${BASH_SOURCE[0]}")/configs.sh"
pin_config "$TMP/pin.yaml" "$PIN" "echo:$PIN_ECHO:$P_ECHO" "close:$PIN_CLOSE:$P_CLOSE"
haproxy_config "$TMP/haproxy.cfg" "$(nproc)" 4000 "echo:$HA_ECHO:$P_ECHO" "close:$HA_CLOSE:$P_CLOSE"
"$PIN" run -c "$TMP/pin.yaml" >"$TMP/pin.log" 2>&1 &
PIN_PID=$!
PIDS+=("$PIN_PID")
haproxy -db -f "$TMP/haproxy.cfg" >"$TMP/haproxy.log" 2>&1 &
HA_PID=$!
PIDS+=("$HA_PID")
for p in "$PIN_ECHO" "$PIN_CLOSE" "$HA_ECHO" "$HA_CLOSE"; do wait_listen "$p"; done
HA_VERSION=$(haproxy -v | sed -n '1s/^HAProxy version \([0-9.]*\).*/\1/p')

# count TARGET PID ORDER ADDR REP: strace summary in
# $RAW/strace-TARGET-ORDER-REP.txt
count() {
    local t=$1 pid=$2 order=$3 addr=$4 rep=$5 st out flags=()
    [ "$order" = client ] && flags=(--client-closes)
    out="$RAW/strace-$t-$order-$rep.txt"
    strace -c -f -q -p "$pid" -o "$out" &
    st=$!
    wait_traced "$pid"
    "$LG" churn --target "$addr" --concurrency "$LOOPS" --size 64 --max-conns "$PER_LOOP" \
        --duration 300 --warmup 0 "${flags[@]}" >"$TMP/churn-$t-$order.json"
    kill -INT "$st"
    wait "$st" || true
    python3 - "$TMP/churn-$t-$order.json" "$CONNS" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = int(sys.argv[2])
if d["conns"] != want or d["errors"]:
    print(f"syscalls.sh: {d['conns']} connections of {want}, {d['errors']} errors", file=sys.stderr)
    sys.exit(1)
PY
}

for rep in $(seq "$REPEAT"); do
    for order in backend client; do
        if [ "$order" = backend ]; then pin_addr=127.0.0.1:$PIN_CLOSE ha_addr=127.0.0.1:$HA_CLOSE
        else pin_addr=127.0.0.1:$PIN_ECHO ha_addr=127.0.0.1:$HA_ECHO; fi
        count pin-proxy "$PIN_PID" "$order" "$pin_addr" "$rep"
        count haproxy "$HA_PID" "$order" "$ha_addr" "$rep"
    done
done

python3 - "$RAW" "$CONNS" "HAProxy $HA_VERSION" "$REPEAT" <<'PY'
import sys
raw, conns, ha, repeat = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])

def summary(path):
    calls = {}
    for line in open(path):
        f = line.split()
        # "% time seconds usecs/call calls [errors] syscall"
        if len(f) < 5 or not f[0][0].isdigit() or f[-1] == "total":
            continue
        calls[f[-1]] = int(f[3])
    return calls

def median_run(target, order):
    """Each run's calls per connection, and the run with the median total."""
    runs = [summary(f"{raw}/strace-{target}-{order}-{r}.txt") for r in range(1, repeat + 1)]
    totals = [sum(run.values()) / conns for run in runs]
    middle = sorted(range(repeat), key=lambda i: totals[i])[(repeat - 1) // 2]
    return runs[middle], totals

def listed(totals):
    return " ".join(f"{t:.2f}" for t in totals)

print(f"Syscalls per churned connection (`strace -c -f` on the proxy over exactly "
      f"{conns:,} connections, 32 at a time, 64 B echoed, "
      + ("once; " if repeat == 1 else f"{repeat} times each; the median run; ")
      + "`bench/syscalls.sh`):")
print()
print(f"| syscalls per connection | pin-proxy | {ha} | ratio | target |")
print("|---|---:|---:|---:|---|")
for order, label in (("backend", "backend closes first"), ("client", "client closes first")):
    pin, pin_runs = median_run("pin-proxy", order)
    hap, hap_runs = median_run("haproxy", order)
    tp, th = sum(pin.values()) / conns, sum(hap.values()) / conns
    verdict = "met" if tp <= th else "missed"
    print(f"| {label}: all | {tp:.2f} | {th:.2f} | {tp / th:.2f} | ≤ 1.0× {verdict} |")
    if repeat > 1:
        print(f"| ↳ each run | {listed(pin_runs)} | {listed(hap_runs)} | | |")
    names = sorted(set(pin) | set(hap), key=lambda n: -(pin.get(n, 0) + hap.get(n, 0)))
    for n in names:
        a, b = pin.get(n, 0) / conns, hap.get(n, 0) / conns
        if max(a, b) >= 0.05:
            print(f"| ↳ {n} | {a:.2f} | {b:.2f} | | |")
PY
