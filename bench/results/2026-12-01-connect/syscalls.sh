#!/usr/bin/env bash
# syscalls per connection (perf tracepoint counts) under churn for binaries $@
cd "$(dirname "$0")/../../.."
ulimit -n "$(ulimit -Hn)"
LG=target/loadgen/release/loadgen
read -r A1 A2 <<<"$($LG free-ports 2 | tr '\n' ' ')"
$LG echo-server --listen 127.0.0.1:$A1 --close-first 64 >/dev/null 2>&1 & E=$!
cat > /tmp/sc.yaml <<Y
log: { level: warn, format: text }
defaults:
  max_connections: 20000
  health: { probe: connect, interval: 1h }
pools:
  - { name: close, listen: 127.0.0.1:$A2, backends: [ "127.0.0.1:$A1" ] }
Y
for bin in "$@"; do
  $bin run -c /tmp/sc.yaml >/dev/null 2>&1 & P=$!
  sleep 1
  perf stat -e 'syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,syscalls:sys_enter_accept4,syscalls:sys_enter_getsockopt,syscalls:sys_enter_setsockopt,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_recvfrom,context-switches' -p $P -o /tmp/sc-perf.txt &
  S=$!; sleep 0.3
  out=$($LG churn --target 127.0.0.1:$A2 --concurrency 32 --size 64 --duration 4 --warmup 0 --pid $P 2>/dev/null | tail -1)
  kill -INT $S; wait $S 2>/dev/null
  n=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["conns"])')
  echo "$bin conns $n $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("conn/s", d["conn_per_s"], "cpu/conn", d["cpu_us_per_conn"])')"
  awk -v n=$n '/syscalls:|context-switches/{gsub(",","",$1); printf "   %-40s %.3f\n", $2, $1/n}' /tmp/sc-perf.txt
  kill $P; wait $P 2>/dev/null
done
kill $E
