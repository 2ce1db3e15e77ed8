#!/usr/bin/env bash
# Start the two echo backends (plain, and closing first), pin-proxy and HAProxy
# (nbthread 2) on free loopback ports; write the ports to $D/ports. Run from the repository root.
set -euo pipefail
LG=${LG:-bench/loadgen/target/release/loadgen}
PIN=${PIN:-target/release/pin-proxy}
D=${D:-/tmp/pf}; mkdir -p "$D"
ulimit -n 20000
pkill -f "haproxy -db -f $D/" || true; pkill -f "pin-proxy run -c $D/" || true
sleep 0.3
read -r P_ECHO P_CLOSE PIN_ECHO PIN_CLOSE HA_ECHO HA_CLOSE <<<"$($LG free-ports 6 | tr '\n' ' ')"
setsid $LG echo-server --listen 127.0.0.1:$P_ECHO >/dev/null 2>&1 < /dev/null &
setsid $LG echo-server --listen 127.0.0.1:$P_CLOSE --close-first 64 >/dev/null 2>&1 < /dev/null &
# shellcheck source=bench/configs.sh
. bench/configs.sh
pin_config "$D/pin.yaml" "$PIN" "echo:$PIN_ECHO:$P_ECHO" "close:$PIN_CLOSE:$P_CLOSE"
haproxy_config "$D/haproxy.cfg" 2 9000 "echo:$HA_ECHO:$P_ECHO" "close:$HA_CLOSE:$P_CLOSE"
setsid $PIN run -c $D/pin.yaml > $D/pin.log 2>&1 < /dev/null &
setsid haproxy -db -f $D/haproxy.cfg > $D/ha.log 2>&1 < /dev/null &
sleep 1
echo "PIN_ECHO=$PIN_ECHO PIN_CLOSE=$PIN_CLOSE HA_ECHO=$HA_ECHO HA_CLOSE=$HA_CLOSE" > $D/ports
cat $D/ports
