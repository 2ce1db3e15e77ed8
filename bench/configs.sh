# shellcheck shell=bash
# The pin-proxy and HAProxy configs the benchmarks run, sourced by
# bench/run.sh, bench/syscalls.sh and the scripts under bench/results/:
# one pool (pin-proxy) or frontend and backend (HAProxy) per
# NAME:LISTEN_PORT:BACKEND_PORT, all on 127.0.0.1. Each file is checked by
# its own proxy before it is used.

# pin_config FILE PIN_BINARY NAME:LISTEN_PORT:BACKEND_PORT...
# Probes: one at start-up only (`connect`, every hour); logs at `warn`.
pin_config() {
    local file=$1 pin=$2 pool name listen backend
    shift 2
    {
        echo "log: { level: warn, format: text }"
        echo "defaults:"
        echo "  max_connections: 20000"
        echo "  health: { probe: connect, interval: 1h }"
        echo "pools:"
        for pool in "$@"; do
            IFS=: read -r name listen backend <<<"$pool"
            echo "  - name: $name"
            echo "    listen: 127.0.0.1:$listen"
            echo "    backends: [ \"127.0.0.1:$backend\" ]"
        done
    } >"$file"
    "$pin" check -c "$file" >/dev/null
}

# haproxy_config FILE NBTHREAD MAXCONN NAME:LISTEN_PORT:BACKEND_PORT...
# `mode tcp`, `balance leastconn`, timeouts of an hour, no health checks.
haproxy_config() {
    local file=$1 threads=$2 maxconn=$3 pool name listen backend
    shift 3
    {
        printf 'global\n    nbthread %s\n    maxconn %s\n' "$threads" "$maxconn"
        printf 'defaults\n    mode tcp\n    maxconn %s\n' "$maxconn"
        printf '    timeout connect 5s\n    timeout client 1h\n    timeout server 1h\n'
        for pool in "$@"; do
            IFS=: read -r name listen backend <<<"$pool"
            printf 'frontend %s\n    bind 127.0.0.1:%s\n    default_backend %s\n' "$name" "$listen" "$name"
            printf 'backend %s\n    balance leastconn\n    server s1 127.0.0.1:%s\n' "$name" "$backend"
        done
    } >"$file"
    haproxy -c -q -f "$file"
}

# For the scripts under results/, run from the repository root: the load
# tool and pin-proxy binaries in LG and PIN (each may be given in the
# environment), and a scratch directory D, removed on exit together with
# every background job of the script.
# shellcheck disable=SC2034 # LG, PIN and D are the caller's
scratch() {
    LG=${LG:-bench/loadgen/target/release/loadgen}
    PIN=${PIN:-target/release/pin-proxy}
    D=$(mktemp -d)
    trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$D"' EXIT
}

# start_proxies: pin-proxy on $D/pin.yaml and HAProxy on $D/ha.cfg, in the
# background; their pids in PID_PIN and PID_HA.
# shellcheck disable=SC2034 # the pids are the caller's
start_proxies() {
    "$PIN" run -c "$D/pin.yaml" >/dev/null 2>&1 &
    PID_PIN=$!
    haproxy -db -f "$D/ha.cfg" >/dev/null 2>&1 &
    PID_HA=$!
}

# start_splice_copy_ha NAME:SPLICE_PORT:COPY_PORT:HA_PORT:BACKEND_PORT...:
# one pool / frontend per argument in each of three configs in $D, and the
# three proxies on them in the background: pin-proxy as built (pin.yaml,
# PID_PIN), pin-proxy copying every byte (PIN_PROXY_SPLICE=off, copy.yaml,
# PID_COPY) and HAProxy (ha.cfg, PID_HA); then 1.5 s for pin-proxy's
# start-up probes to reach the backends before any load does.
# shellcheck disable=SC2034 # the pid is the caller's
start_splice_copy_ha() {
    local spec name splice copy ha backend to_pin=() to_copy=() to_ha=()
    for spec in "$@"; do
        IFS=: read -r name splice copy ha backend <<<"$spec"
        to_pin+=("$name:$splice:$backend") to_copy+=("$name:$copy:$backend") to_ha+=("$name:$ha:$backend")
    done
    pin_config "$D/pin.yaml" "$PIN" "${to_pin[@]}"
    pin_config "$D/copy.yaml" "$PIN" "${to_copy[@]}"
    haproxy_config "$D/ha.cfg" 2 9000 "${to_ha[@]}"
    start_proxies
    PIN_PROXY_SPLICE=off "$PIN" run -c "$D/copy.yaml" >/dev/null 2>&1 &
    PID_COPY=$!
    sleep 1.5
}
