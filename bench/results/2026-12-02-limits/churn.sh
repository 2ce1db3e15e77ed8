#!/usr/bin/env bash
# churn.sh PORT PIDFILE [extra]: client-first churn 5 s on CPU 1
cd /work/main
taskset -c 1 target/loadgen/release/loadgen churn --target 127.0.0.1:$1 --concurrency 32 --size 64 --duration ${SECS:-5} --warmup 1 --pid $(cat /tmp/exp/$2) ${@:3} 2>/dev/null | python3 -c "
import json,sys; d=json.load(sys.stdin); print(' '.join(f'{k}={d[k]}' for k in d if k in ('conn_per_s','cpu_us_per_conn','p50_us','p99_us','errors')))"
