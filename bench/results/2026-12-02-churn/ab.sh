#!/bin/bash
# A/B churn: A=binary B=binary R=rounds T=secs CASE=churn|churn_cf
LG=/work/main/target/loadgen/release/loadgen
cd /tmp/ch
ulimit -n 20000
$A run -c pin.yaml > a.log 2>&1 & AP=$!
$B run -c pinB.yaml > b.log 2>&1 & BP=$!
sleep 1.5
HP=$(cat ha.pid)
for r in $(seq $R); do
  for t in a:$AP:1910 b:$BP:1930 ha:$HP:1920; do
    IFS=: read n pid pre <<<"$t"
    if [ "$CASE" = churn_cf ]; then port=${pre}2; extra=--client-closes; else port=${pre}1; extra=; fi
    out=$($LG --tag r=$r --tag t=$n churn --target 127.0.0.1:$port --concurrency 32 --size 64 --duration $T --warmup 0.5 --pid $pid $extra | tail -1)
    echo "$out" >> ab-$CASE.jsonl
    echo "$r $n $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["conn_per_s"], d["cpu_us_per_conn"], d["p99_us"])')"
  done
done
kill $AP $BP
