#!/usr/bin/env bash
# per-thread CPU of pin-proxy during pp64, several fresh starts
cd "$(dirname "$0")/../../.."
ulimit -n "$(ulimit -Hn)"
LG=target/loadgen/release/loadgen
BIN=${BIN:-target/release/pin-proxy}
read -r A1 A2 <<<"$($LG free-ports 2 | tr '\n' ' ')"
$LG echo-server --listen 127.0.0.1:$A1 >/dev/null 2>&1 & E=$!
cat > /tmp/imb.yaml <<Y
log: { level: warn, format: text }
defaults:
  max_connections: 20000
  health: { probe: connect, interval: 1h }
pools:
  - { name: echo, listen: 127.0.0.1:$A2, backends: [ "127.0.0.1:$A1" ] }
Y
for i in 1 2 3 4; do
  $BIN run -c /tmp/imb.yaml >/dev/null 2>&1 & P=$!
  sleep 0.7
  out=$($LG pingpong --target 127.0.0.1:$A2 --conns 64 --size 64 --duration 3 --warmup 0.5 --pid $P 2>/dev/null | tail -1)
  t=$(for d in /proc/$P/task/*; do c=$(cat $d/comm); s=($(cat $d/stat | sed 's/.*) //')); echo "$c=$(( ${s[11]} + ${s[12]} ))"; done | grep data | tr '\n' ' ')
  echo "$t $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rps", d["rps"], "p99", d["p99_us"])')"
  kill $P; wait $P 2>/dev/null
done
kill $E
