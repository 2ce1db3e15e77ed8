#!/bin/bash
# A/B over cases: A/B binaries, AENV/BENV env assignments, R rounds, T secs, CASES list.
LG=/work/main/target/loadgen/release/loadgen
cd /tmp/ch
ulimit -n 20000
OUT=${OUT:-ab2.jsonl}
$LG echo-server --listen 127.0.0.1:19001 --close-first 64 >cf.log 2>&1 & CF=$!
$LG echo-server --listen 127.0.0.1:19002 > e.log 2>&1 & EP=$!
env $AENV $A run -c pin.yaml > a.log 2>&1 & AP=$!
env $BENV $B run -c pinB.yaml > b.log 2>&1 & BP=$!
haproxy -db -f ha.cfg > ha.log 2>&1 & HP=$!
sleep 2
for r in $(seq $R); do
  for c in $CASES; do
  for t in a:$AP:1910 b:$BP:1930 ha:$HP:1920; do
    IFS=: read n pid pre <<<"$t"
    case $c in
      churn) cmd=(churn --target 127.0.0.1:${pre}1 --concurrency 32 --size 64) ;;
      churn_cf) cmd=(churn --target 127.0.0.1:${pre}2 --concurrency 32 --size 64 --client-closes) ;;
      pp64) cmd=(pingpong --target 127.0.0.1:${pre}2 --conns 64 --size 64) ;;
    esac
    out=$($LG --tag r=$r --tag t=$n --tag case=$c "${cmd[@]}" --duration $T --warmup 0.5 --pid $pid | tail -1)
    echo "$out" >> $OUT
    echo "$r $c $n $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("conn_per_s", d.get("rps")), d.get("cpu_us_per_conn", d.get("cpu_us_per_req")), d["p99_us"], d.get("p999_us"), d.get("loop_conns",""))')"
  done
  done
done
kill $AP $BP $HP $CF $EP
