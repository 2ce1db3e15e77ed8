#!/usr/bin/env bash
# pin-proxy vs HAProxy vs no proxy, side by side on loopback (issue 5).
# Usage: bench/run.sh [--quick] [--rounds N] [--nice N] [--no-micro] [--scale] [--threads N] [--cases LIST]
# Prints one Markdown table of medians across rounds with pin-proxy/HAProxy
# ratios, the idle scaling rows and the registry micro-benchmark; keeps raw
# outputs in bench/results/DATE/. See bench/README.md for what each figure means.
#   --scale      also the long runs: P2P load (9,000 conns, 60 s) via both
#                proxies and none, pin-proxy's spread drain, live upgrade at
#                9,000 (counts: P2P_CONNS P2P_SECS P2P_RAMP DRAIN_CONNS
#                DRAIN_PINGERS DRAIN_SPREAD UPGRADE_CONNS UPGRADE_PINGERS)
#   --threads N  every proxy on CPUs 0..N-1 only (pin-proxy then runs N
#                loops, HAProxy nbthread N), backends and clients on the rest
#   --cases LIST only these loads, comma-separated, from iperf1 iperf8
#                iperf8r pp1 pp64 churn churn_cf idle (default all); the rest
#                of the table is then empty
set -euo pipefail

usage() {
    sed -n '2,16s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

ROUNDS=3 QUICK=0 MICRO=1 ROUNDS_SET=0 SCALE=0 NICE='' THREADS='' CASES=iperf1,iperf8,iperf8r,pp1,pp64,churn,churn_cf,idle
CMDLINE="bench/run.sh $*"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --rounds) ROUNDS="${2:?--rounds needs a number}"; ROUNDS_SET=1; shift ;;
        --nice) NICE="${2:?--nice needs a niceness}"; shift ;;
        --no-micro) MICRO=0 ;;
        --scale) SCALE=1 ;;
        --threads) THREADS="${2:?--threads needs a number of CPUs}"; shift ;;
        --cases) CASES="${2:?--cases needs a list}"; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    [ "$ROUNDS_SET" = 1 ] || ROUNDS=1
    T=3 WARM=0.5 HOLD=1 P2P_DEFAULT_SECS=10
else
    T=10 WARM=1 HOLD=2 P2P_DEFAULT_SECS=60
fi
# 9,850: pin-proxy's own descriptor budget at a 20,000 limit is 9,861
# connections ((limit - 256 reserved - those open) / 2); HAProxy holds as many.
IDLE_COUNT=${IDLE_COUNT:-9850}
IDLE_STEPS=${IDLE_STEPS:-1000,2500,5000,9000,9500}
P2P_CONNS=${P2P_CONNS:-9000} P2P_SECS=${P2P_SECS:-$P2P_DEFAULT_SECS} P2P_RAMP=${P2P_RAMP:-1000}
DRAIN_CONNS=${DRAIN_CONNS:-5000} DRAIN_PINGERS=${DRAIN_PINGERS:-50} DRAIN_SPREAD=${DRAIN_SPREAD:-10s}
UPGRADE_CONNS=${UPGRADE_CONNS:-9000} UPGRADE_PINGERS=${UPGRADE_PINGERS:-64}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
T0=$(date +%s)
STAMP=$(date -u +%Y-%m-%dT%H%M%SZ)
OUT="bench/results/$STAMP"
mkdir -p "$OUT/raw"
TMP=$(mktemp -d)
PIDS=()

# Progress goes to the terminal (fd 3) even where stderr is redirected.
exec 3>&2
log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&3; }

cleanup() {
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'log "stopped: command failed at line $LINENO"' ERR
trap 'exit 130' INT TERM

# ---- tools ------------------------------------------------------------------
install_missing() {
    local missing=()
    command -v haproxy >/dev/null || missing+=(haproxy)
    command -v iperf3 >/dev/null || missing+=(iperf3)
    command -v taskset >/dev/null || missing+=(util-linux)
    command -v strace >/dev/null || missing+=(strace)
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    log "installing ${missing[*]} with apt"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}"
}
install_missing
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup.rs) first" >&2; exit 1; }

# ---- build ------------------------------------------------------------------
log "building pin-proxy and the load tool (release)"
cargo build --release --quiet
LG_CARGO=(--manifest-path bench/loadgen/Cargo.toml --target-dir target/loadgen)
cargo build --release --quiet "${LG_CARGO[@]}" --bin loadgen
# Built now and run from here later: sources that change meanwhile (a
# shared tree) must not trigger a rebuild in the middle of the report.
BENCH_BINS=()
if [ "$MICRO" = 1 ]; then
    mapfile -t BENCH_BINS < <(cargo bench --quiet "${LG_CARGO[@]}" --bench registry --bench footprint --bench proxy_header \
        --no-run --message-format=json-render-diagnostics |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | grep -E '/(registry|footprint|proxy_header)-[0-9a-f]+$')
    # A process substitution hides cargo's exit status: check what came out
    # (only the three benches: cargo may also list the loadgen binary it built
    # for them).
    [ ${#BENCH_BINS[@]} -eq 3 ] || log "FAILED: micro-benchmark build (see the errors above)"
fi
PIN="$ROOT/target/release/pin-proxy"
LG="$ROOT/target/loadgen/release/loadgen"
T_BUILT=$(date +%s)
# On a shared machine, other work steals CPU from the proxies unevenly; a
# negative niceness (root) for everything started from here on evens it out.
if [ -n "$NICE" ]; then
    renice -n "$NICE" -p $$ >/dev/null
fi

# ---- limits, ports, versions ------------------------------------------------
ulimit -n "$(ulimit -Hn)"
NOFILE=$(ulimit -n)
NCPU=$(nproc)
ALL_CPUS="0-$((NCPU - 1))"
# Where the proxies run, and where everything else does (--threads).
ON_PROXY=() ON_LOAD=() PROXY_CPUS=$ALL_CPUS LOAD_CPUS=$ALL_CPUS PROXY_THREADS=$NCPU
if [ -n "$THREADS" ]; then
    if ! [ "$THREADS" -ge 1 ] 2>/dev/null || [ "$THREADS" -ge "$NCPU" ]; then
        echo "--threads $THREADS: needs 1 to $((NCPU - 1)) (the other CPUs run the load)" >&2
        exit 2
    fi
    PROXY_THREADS=$THREADS
    PROXY_CPUS="0-$((THREADS - 1))" LOAD_CPUS="$THREADS-$((NCPU - 1))"
    ON_PROXY=(taskset -c "$PROXY_CPUS") ON_LOAD=(taskset -c "$LOAD_CPUS")
fi
# Each idle connection is two descriptors in a proxy (one in the client and
# one in the echo server); HAProxy's maxconn leaves it 200 for the rest.
if [ "$NOFILE" != unlimited ] && [ $((IDLE_COUNT * 2 + 200)) -gt "$NOFILE" ]; then
    IDLE_COUNT=$(((NOFILE - 200) / 2))
    log "fd limit $NOFILE: holding $IDLE_COUNT idle connections"
fi
HA_MAXCONN=$(((${NOFILE/unlimited/40000} - 200) / 2))
HA_VERSION=$(haproxy -v | sed -n '1s/^HAProxy version \([0-9.]*\).*/\1/p')

# iperf8r: eight iperf3 servers (the first is P_IPERF's), one stream each,
# each behind a pool or frontend of its own (bench/README.md, "Bulk").
RECEIVERS=8
NPORTS=$((17 + 3 * (RECEIVERS - 1)))
mapfile -t ports < <("$LG" free-ports "$NPORTS")
[ ${#ports[@]} = "$NPORTS" ] || { echo "could not find $NPORTS free ports" >&2; exit 1; }
# ECHO2: the client-first churn's second pair of ports (bench/README.md,
# "What bounds client-first churn").
read -r P_IPERF P_ECHO P_ECHO2 P_CLOSE P_P2P PIN_IPERF PIN_ECHO PIN_ECHO2 PIN_CLOSE PIN_IDLE PIN_P2P \
    HA_IPERF HA_ECHO HA_ECHO2 HA_CLOSE HA_IDLE HA_P2P <<<"${ports[*]:0:17}"
P_IPERFS=("$P_IPERF") PIN_IPERFS=("$PIN_IPERF") HA_IPERFS=("$HA_IPERF")
for k in $(seq 0 $((RECEIVERS - 2))); do
    P_IPERFS+=("${ports[$((17 + 3 * k))]}") PIN_IPERFS+=("${ports[$((18 + 3 * k))]}")
    HA_IPERFS+=("${ports[$((19 + 3 * k))]}")
done

{
    echo "# bench run $STAMP"
    echo "- command: \`$CMDLINE\` (rounds $ROUNDS, ${T}s per load, idle $IDLE_COUNT held)"
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)," \
        "files changed in src/: $(git status --porcelain src 2>/dev/null | wc -l)"
    echo "- machine: $NCPU CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), kernel $(uname -r)"
    echo "- HAProxy $HA_VERSION, $(iperf3 --version | head -1), fd limit $NOFILE"
    # Loopback bulk moves with the congestion control (bench/README.md, "Bulk").
    echo "- TCP congestion control: $(cat /proc/sys/net/ipv4/tcp_congestion_control)," \
        "tcp_wmem $(tr '\t' ' ' </proc/sys/net/ipv4/tcp_wmem), tcp_rmem $(tr '\t' ' ' </proc/sys/net/ipv4/tcp_rmem)"
    echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg), niceness $(ps -o ni= -p $$ | tr -d ' ')"
    if [ -n "$THREADS" ]; then
        echo "- threads: $THREADS (\`--threads $THREADS\`): the proxies on CPUs $PROXY_CPUS only" \
            "(pin-proxy's event loops: $THREADS; HAProxy nbthread $THREADS), backends and clients on" \
            "CPUs $LOAD_CPUS; ping-pong 1 conn still all on CPU 0; results tagged threads=$THREADS"
    else
        echo "- threads: all $NCPU CPUs for everything (pin-proxy one loop per CPU, HAProxy" \
            "nbthread $NCPU); results tagged threads=all"
    fi
    if [ "$SCALE" = 1 ]; then
        echo "- scale: P2P $P2P_CONNS conns for ${P2P_SECS}s (ramp $P2P_RAMP/s), drain $DRAIN_CONNS conns" \
            "over $DRAIN_SPREAD with $DRAIN_PINGERS pingers, upgrade at $UPGRADE_CONNS conns" \
            "($UPGRADE_PINGERS pingers)"
    fi
} >"$OUT/meta.md"

# ---- processes --------------------------------------------------------------
# start NAME CMD...: run in the background, log to $OUT/NAME.log, set LAST_PID.
start() {
    local name=$1
    shift
    "$@" >"$OUT/$name.log" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

stop() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    local kept=() p
    for p in "${PIDS[@]}"; do
        [ "$p" = "$1" ] || kept+=("$p")
    done
    PIDS=("${kept[@]}")
}

# Wait (bounded) until something listens on 127.0.0.1:PORT.
wait_listen() {
    local hex
    hex=$(printf '%04X' "$1")
    for _ in $(seq 100); do
        if awk -v p=":$hex\$" '$2 ~ p && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp; then
            return 0
        fi
        sleep 0.1
    done
    echo "nothing listens on port $1" >&2
    return 1
}

# pin_config and haproxy_config.
# shellcheck source=bench/configs.sh
. "$(dirname "${BASH_SOURCE[0]}")/configs.sh"

log "starting backends"
start iperf3-server "${ON_LOAD[@]}" iperf3 -s -B 127.0.0.1 -p "$P_IPERF"
for k in $(seq 1 $((RECEIVERS - 1))); do
    start "iperf3-server-$((k + 1))" "${ON_LOAD[@]}" iperf3 -s -B 127.0.0.1 -p "${P_IPERFS[$k]}"
done
start echo-server "${ON_LOAD[@]}" "$LG" echo-server --listen "127.0.0.1:$P_ECHO" --also-listen "127.0.0.1:$P_ECHO2"
ECHO_PID=$LAST_PID
start echo-close-first "${ON_LOAD[@]}" "$LG" echo-server --listen "127.0.0.1:$P_CLOSE" --close-first 64
start p2p-server "${ON_LOAD[@]}" "$LG" p2p-server --listen "127.0.0.1:$P_P2P"
P2P_PID=$LAST_PID
for p in "${P_IPERFS[@]}" "$P_ECHO" "$P_ECHO2" "$P_CLOSE" "$P_P2P"; do wait_listen "$p"; done

# The receivers' pools and frontends beyond the first (which is `iperf`).
PIN_MORE=() HA_MORE=()
for k in $(seq 1 $((RECEIVERS - 1))); do
    PIN_MORE+=("iperf$((k + 1)):${PIN_IPERFS[$k]}:${P_IPERFS[$k]}")
    HA_MORE+=("iperf$((k + 1)):${HA_IPERFS[$k]}:${P_IPERFS[$k]}")
done
pin_config "$TMP/pin.yaml" "$PIN" "iperf:$PIN_IPERF:$P_IPERF" "echo:$PIN_ECHO:$P_ECHO" "echo2:$PIN_ECHO2:$P_ECHO2" \
    "close:$PIN_CLOSE:$P_CLOSE" "p2p:$PIN_P2P:$P_P2P" "${PIN_MORE[@]}"
pin_config "$TMP/pin-idle.yaml" "$PIN" "idle:$PIN_IDLE:$P_ECHO"
haproxy_config "$TMP/haproxy.cfg" "$PROXY_THREADS" "$HA_MAXCONN" "iperf:$HA_IPERF:$P_IPERF" "echo:$HA_ECHO:$P_ECHO" \
    "echo2:$HA_ECHO2:$P_ECHO2" "close:$HA_CLOSE:$P_CLOSE" "p2p:$HA_P2P:$P_P2P" "${HA_MORE[@]}"
haproxy_config "$TMP/haproxy-idle.cfg" "$PROXY_THREADS" "$HA_MAXCONN" "idle:$HA_IDLE:$P_ECHO"
cp "$TMP"/pin*.yaml "$TMP"/haproxy*.cfg "$OUT/"

log "starting pin-proxy and HAProxy"
start pin-proxy "${ON_PROXY[@]}" "$PIN" run -c "$TMP/pin.yaml"
declare -A PID_OF=([direct]="" [pin-proxy]=$LAST_PID)
start haproxy "${ON_PROXY[@]}" haproxy -db -f "$TMP/haproxy.cfg"
PID_OF[haproxy]=$LAST_PID
for p in "${PIN_IPERFS[@]}" "$PIN_ECHO" "$PIN_ECHO2" "$PIN_CLOSE" "$PIN_P2P" "${HA_IPERFS[@]}" "$HA_ECHO" "$HA_ECHO2" \
    "$HA_CLOSE" "$HA_P2P"; do
    wait_listen "$p"
done
sleep 1 # pin-proxy's start-up probes reach iperf3 first; let them pass
for t in pin-proxy haproxy; do
    echo "- $t open-file limit in effect: $(awk '/^Max open files/ { print $4 " soft, " $5 " hard" }' "/proc/${PID_OF[$t]}/limits")"
done >>"$OUT/meta.md"

declare -A ADDR=(
    [direct,iperf]=127.0.0.1:$P_IPERF [direct,echo]=127.0.0.1:$P_ECHO [direct,close]=127.0.0.1:$P_CLOSE
    [pin-proxy,iperf]=127.0.0.1:$PIN_IPERF [pin-proxy,echo]=127.0.0.1:$PIN_ECHO [pin-proxy,close]=127.0.0.1:$PIN_CLOSE
    [haproxy,iperf]=127.0.0.1:$HA_IPERF [haproxy,echo]=127.0.0.1:$HA_ECHO [haproxy,close]=127.0.0.1:$HA_CLOSE
    [direct,p2p]=127.0.0.1:$P_P2P [pin-proxy,p2p]=127.0.0.1:$PIN_P2P [haproxy,p2p]=127.0.0.1:$HA_P2P
    [direct,echo2]=127.0.0.1:$P_ECHO2 [pin-proxy,echo2]=127.0.0.1:$PIN_ECHO2 [haproxy,echo2]=127.0.0.1:$HA_ECHO2
)
# iperf8r's targets beyond ADDR[$t,iperf], as --also-target arguments.
also_iperf() { # NAME of an array of ports, the first ADDR[$t,iperf]'s
    local -n list=$1
    local k
    for k in $(seq 1 $((RECEIVERS - 1))); do
        printf -- '--also-target\n127.0.0.1:%s\n' "${list[$k]}"
    done
}
declare -A IPERF_PORTS=([direct]=P_IPERFS [pin-proxy]=PIN_IPERFS [haproxy]=HA_IPERFS)
THREADS_TAG=${THREADS:-all}

# Move the echo server onto ECHO_CPUS and the proxy (every thread) onto PROXY_CPUS.
pin_cpus() { # ECHO_CPUS PROXY_CPUS TARGET
    taskset -a -cp "$1" "$ECHO_PID" >/dev/null
    [ -z "${PID_OF[$3]}" ] || taskset -a -cp "$2" "${PID_OF[$3]}" >/dev/null
}

# One measurement: ROUND TARGET CASE; appends a JSON line to results.jsonl.
run_case() {
    local r=$1 t=$2 c=$3
    local tags=(--tag "round=$r" --tag "target=$t" --tag "case=$c" --tag "threads=$THREADS_TAG")
    local pid=()
    [ -z "${PID_OF[$t]}" ] || pid=(--pid "${PID_OF[$t]}")
    local load=(--duration "$T" --warmup "$WARM" "${pid[@]}")
    local lg=("${ON_LOAD[@]}" "$LG" "${tags[@]}")
    log "round $r: $c via $t"
    case "$c" in
        iperf1 | iperf8)
            "${lg[@]}" iperf --target "${ADDR[$t,iperf]}" --streams "${c#iperf}" \
                --time "$T" "${pid[@]}" --raw "$OUT/raw/r$r-$t-$c.json"
            ;;
        iperf8r)
            # Eight streams as eight clients of eight iperf3 servers: each
            # stream has a receiving thread of its own.
            local also
            mapfile -t also < <(also_iperf "${IPERF_PORTS[$t]}")
            "${lg[@]}" iperf --target "${ADDR[$t,iperf]}" "${also[@]}" --streams 1 \
                --time "$T" "${pid[@]}" --raw "$OUT/raw/r$r-$t-$c.json"
            ;;
        pp1)
            # By design on one CPU whatever --threads says: client, proxy, backend.
            pin_cpus 0 0 "$t"
            local rc=0
            taskset -c 0 "$LG" "${tags[@]}" pingpong --target "${ADDR[$t,echo]}" --conns 1 \
                --size 64 --threads 1 "${load[@]}" || rc=$?
            pin_cpus "$LOAD_CPUS" "$PROXY_CPUS" "$t"
            return "$rc"
            ;;
        pp64)
            "${lg[@]}" pingpong --target "${ADDR[$t,echo]}" --conns 64 --size 64 "${load[@]}"
            ;;
        churn)
            "${lg[@]}" churn --target "${ADDR[$t,close]}" --concurrency 32 --size 64 "${load[@]}"
            ;;
        churn_cf)
            # Two targets: one alone caps every target, with a proxy or
            # without, at the kernel's reuse of TIME_WAIT ports.
            "${lg[@]}" churn --target "${ADDR[$t,echo]}" --also-target "${ADDR[$t,echo2]}" \
                --concurrency 32 --size 64 --client-closes "${load[@]}"
            ;;
        p2p)
            "${lg[@]}" p2p --target "${ADDR[$t,p2p]}" --conns "$P2P_CONNS" --secs "$P2P_SECS" \
                --ramp "$P2P_RAMP" --server-pid "$P2P_PID" "${pid[@]}" \
                --timeline "$OUT/raw/r$r-$t-p2p-timeline.txt"
            ;;
    esac
}

# Idle connections through a fresh proxy instance (a used one's allocator
# would hide growth): ROUND TARGET.
run_idle() {
    local r=$1 t=$2 port pid
    log "round $r: $IDLE_COUNT idle connections via $t"
    if [ "$t" = pin-proxy ]; then
        port=$PIN_IDLE
        start "pin-proxy-idle-r$r" "${ON_PROXY[@]}" "$PIN" run -c "$TMP/pin-idle.yaml"
    else
        port=$HA_IDLE
        start "haproxy-idle-r$r" "${ON_PROXY[@]}" haproxy -db -f "$TMP/haproxy-idle.cfg"
    fi
    pid=$LAST_PID
    wait_listen "$port"
    sleep 1
    local rc=0
    "${ON_LOAD[@]}" "$LG" --tag "round=$r" --tag "target=$t" --tag case=idle --tag "threads=$THREADS_TAG" \
        idle --target "127.0.0.1:$port" --count "$IDLE_COUNT" --steps "$IDLE_STEPS" --pid "$pid" \
        --hold "$HOLD" || rc=$?
    stop "$pid"
    return "$rc"
}

# pin-proxy only, each on an instance of its own that loadgen starts (HAProxy
# has no drain, and no live upgrade that keeps connections): ROUND CASE.
run_own() {
    local r=$1 c=$2
    local tags=(--tag "round=$r" --tag target=pin-proxy --tag "case=$c" --tag "threads=$THREADS_TAG")
    local cpus=()
    [ -z "$THREADS" ] || cpus=(--proxy-cpus "$PROXY_CPUS")
    log "round $r: $c via pin-proxy"
    case "$c" in
        drain)
            "${ON_LOAD[@]}" "$LG" "${tags[@]}" drain --proxy "$PIN" --conns "$DRAIN_CONNS" \
                --pingers "$DRAIN_PINGERS" --spread "$DRAIN_SPREAD" "${cpus[@]}"
            ;;
        upgrade)
            "${ON_LOAD[@]}" "$LG" "${tags[@]}" upgrade --proxy "$PIN" --conns "$UPGRADE_CONNS" \
                --pingers "$UPGRADE_PINGERS" --upgrades 3 "${cpus[@]}"
            ;;
    esac
}

# ---- rounds -----------------------------------------------------------------
# wanted CASE: whether --cases lists CASE.
wanted() { [[ ",$CASES," == *",$1,"* ]]; }
T_MEASURE=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
    # Interleaved, and the proxies' order alternates from round to round.
    if [ $((r % 2)) = 1 ]; then order=(direct pin-proxy haproxy); else order=(direct haproxy pin-proxy); fi
    for c in iperf1 iperf8 iperf8r pp1 pp64 churn churn_cf; do
        wanted "$c" || continue
        for t in "${order[@]}"; do
            run_case "$r" "$t" "$c" >>"$OUT/results.jsonl" 2>>"$OUT/loadgen.log" ||
                log "FAILED: round $r $c via $t (see $OUT/loadgen.log)"
        done
    done
    for t in "${order[@]:1}"; do
        wanted idle || break
        run_idle "$r" "$t" >>"$OUT/results.jsonl" 2>>"$OUT/loadgen.log" ||
            log "FAILED: round $r idle via $t (see $OUT/loadgen.log)"
    done
    [ "$SCALE" = 1 ] || continue
    for t in "${order[@]}"; do
        run_case "$r" "$t" p2p >>"$OUT/results.jsonl" 2>>"$OUT/loadgen.log" ||
            log "FAILED: round $r p2p via $t (see $OUT/loadgen.log)"
    done
    for c in drain upgrade; do
        run_own "$r" "$c" >>"$OUT/results.jsonl" 2>>"$OUT/loadgen.log" ||
            log "FAILED: round $r $c via pin-proxy (see $OUT/loadgen.log)"
    done
done
T_MEASURED=$(date +%s)
echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.md"

# Counted, not timed: each proxy's system calls per churned connection.
log "syscalls per connection (strace)"
SYSCALLS_RAW="$OUT/raw" "${ON_LOAD[@]}" bench/syscalls.sh "$PIN" "$LG" >"$OUT/syscalls.md" \
    2>>"$OUT/loadgen.log" || log "FAILED: syscall counts (see $OUT/loadgen.log)"

if [ "$MICRO" = 1 ]; then
    log "registry micro-benchmark"
    micro=()
    [ "$QUICK" = 1 ] && micro=(--quick)
    for bin in "${BENCH_BINS[@]}"; do
        case "$(basename "$bin")" in
            registry-*) "$bin" "${micro[@]}" >"$OUT/microbench.md" || log "FAILED: micro-benchmark" ;;
            footprint-*) "$bin" >"$OUT/footprint.md" || log "FAILED: footprint" ;;
            proxy_header-*) "$bin" "${micro[@]}" >"$OUT/proxy_header.md" || log "FAILED: PROXY header" ;;
        esac
    done
fi
T_END=$(date +%s)
echo "- time: build $((T_BUILT - T0)) s, measuring $((T_MEASURED - T_MEASURE)) s, total $((T_END - T0)) s" >>"$OUT/meta.md"

# ---- report -----------------------------------------------------------------
"$LG" table "$OUT/results.jsonl" --haproxy "HAProxy $HA_VERSION" >"$OUT/table.md"
{
    cat "$OUT/meta.md"
    echo
    cat "$OUT/table.md"
    if [ -s "$OUT/syscalls.md" ]; then
        echo
        cat "$OUT/syscalls.md"
    fi
    if [ -s "$OUT/microbench.md" ]; then
        echo
        echo "Registry micro-benchmark (ns per call):"
        echo
        cat "$OUT/microbench.md"
    fi
    if [ -s "$OUT/proxy_header.md" ]; then
        echo
        echo "PROXY protocol header, bytes and parse time (ns per call):"
        echo
        cat "$OUT/proxy_header.md"
    fi
    if [ -s "$OUT/footprint.md" ]; then
        echo
        echo "Per-connection task size (idle RSS floor in user space):"
        echo
        cat "$OUT/footprint.md"
    fi
} | tee "$OUT/report.md"
log "raw outputs in $OUT"
