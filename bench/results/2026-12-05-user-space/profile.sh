#!/usr/bin/env bash
# profile.sh SECS: pin-proxy's user space per churned connection, by the
# nearest frame of its own code. Client-first churn over two targets (as
# bench/run.sh's churn_cf: 32 loops, 64 B) through a pin-proxy built with
# frame pointers, `perf record -g` on it for SECS in the middle; then
# attr.py splits the user-space samples (those whose top frame is not the
# kernel's) by the first `pin_proxy::` frame on the stack, so tokio, libc
# and the allocator count for the function of pin-proxy that called them.
# Prints the load tool's JSON, then µs per connection by function.
# Run from the repository root as root. Builds into /tmp/fp-target.
set -euo pipefail
# shellcheck source=bench/configs.sh
. bench/configs.sh
RUSTFLAGS="-C force-frame-pointers=yes" CARGO_TARGET_DIR=/tmp/fp-target cargo build --release -q
PIN=/tmp/fp-target/release/pin-proxy
scratch
S=$1
mapfile -t p < <("$LG" free-ports 4)
"$LG" echo-server --listen "127.0.0.1:${p[0]}" --also-listen "127.0.0.1:${p[1]}" >/dev/null 2>&1 &
pin_config "$D/pin.yaml" "$PIN" "a:${p[2]}:${p[0]}" "b:${p[3]}:${p[1]}"
"$PIN" run -c "$D/pin.yaml" >/dev/null 2>&1 &
pin=$!
sleep 1.5
nice -n -10 "$LG" churn --target "127.0.0.1:${p[2]}" --also-target "127.0.0.1:${p[3]}" --concurrency 32 \
    --size 64 --duration $((S + 2)) --warmup 0.5 --pid "$pin" --client-closes >"$D/r.json" 2>/dev/null &
w=$!
sleep 1.5
perf record -q -g -p "$pin" -o "$D/pin.data" -- sleep "$S" >/dev/null 2>&1
wait "$w"
cat "$D/r.json"
echo
perf script -i "$D/pin.data" 2>/dev/null >"$D/pin.script"
python3 "$(dirname "$0")/attr.py" "$D/pin.script" "$(python3 -c "import json; print(json.load(open('$D/r.json'))['cpu_us_per_conn'])")"
