#!/usr/bin/env bash
# Start two echo backends (plain, and closing first) and four proxies on free
# loopback ports: pin-proxy at NEW and at OLD (two builds), HAProxy (nbthread 2)
# as configured for every benchmark, and HAProxy with `option tcp-smart-connect`.
# Writes the ports to $D/ports. Run from the repository root.
# Usage: NEW=BIN OLD=BIN bench/results/2026-12-03-smart-connect/setup.sh
# Each process gets its own session (setsid), so its own scheduler autogroup;
# ONE_SESSION=1 keeps them all in the caller's, as bench/run.sh does
# (../2026-12-04-noise/NOTE.md).
set -euo pipefail
LG=${LG:-bench/loadgen/target/release/loadgen}
NEW=${NEW:?pin-proxy binary with the change} OLD=${OLD:?pin-proxy binary without it}
D=${D:-/tmp/sc}; mkdir -p "$D"
SESSION=(setsid)
[ "${ONE_SESSION:-}" = 1 ] && SESSION=()
ulimit -n 20000
pkill -f "haproxy -db -f $D/" || true; pkill -f "run -c $D/" || true
sleep 0.3
read -r P_ECHO P_CLOSE N_E N_C O_E O_C H_E H_C S_E S_C <<<"$($LG free-ports 10 | tr '\n' ' ')"
"${SESSION[@]}" "$LG" echo-server --listen "127.0.0.1:$P_ECHO" >/dev/null 2>&1 < /dev/null &
"${SESSION[@]}" "$LG" echo-server --listen "127.0.0.1:$P_CLOSE" --close-first 64 >/dev/null 2>&1 < /dev/null &
# shellcheck source=bench/configs.sh
. bench/configs.sh
pin_config "$D/new.yaml" "$NEW" "echo:$N_E:$P_ECHO" "close:$N_C:$P_CLOSE"
pin_config "$D/old.yaml" "$OLD" "echo:$O_E:$P_ECHO" "close:$O_C:$P_CLOSE"
haproxy_config "$D/ha.cfg" 2 9000 "echo:$H_E:$P_ECHO" "close:$H_C:$P_CLOSE"
haproxy_config "$D/ha-sc.cfg" 2 9000 "echo:$S_E:$P_ECHO" "close:$S_C:$P_CLOSE"
sed -i '/^defaults/a\    option tcp-smart-connect' "$D/ha-sc.cfg"
haproxy -c -q -f "$D/ha-sc.cfg"
"${SESSION[@]}" "$NEW" run -c "$D/new.yaml" > "$D/new.log" 2>&1 < /dev/null &
"${SESSION[@]}" "$OLD" run -c "$D/old.yaml" > "$D/old.log" 2>&1 < /dev/null &
"${SESSION[@]}" haproxy -db -f "$D/ha.cfg" > "$D/ha.log" 2>&1 < /dev/null &
"${SESSION[@]}" haproxy -db -f "$D/ha-sc.cfg" > "$D/ha-sc.log" 2>&1 < /dev/null &
sleep 1
cat > "$D/ports" <<PORTS
new $N_E $N_C run -c $D/new.yaml
old $O_E $O_C run -c $D/old.yaml
ha $H_E $H_C haproxy -db -f $D/ha.cfg
ha-sc $S_E $S_C haproxy -db -f $D/ha-sc.cfg
PORTS
cat "$D/ports"
