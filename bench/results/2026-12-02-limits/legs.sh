#!/usr/bin/env bash
port=$1
iperf3 -c 127.0.0.1 -p $port -t ${SECS:-4} -J > /tmp/exp/l.json &
sleep $(python3 -c "print(${SECS:-4}-0.4)")
ss -tniH state established | paste - - | sed -E 's/\s+/ /g' | grep -E "bytes_sent:[0-9]{9,}" | while read -r l; do
  set -- $l
  r=$(echo "$l" | grep -oE "bytes_retrans:[0-9]+|dsack_dups:[0-9]+|reord_seen:[0-9]+|bytes_sent:[0-9]+" | tr '\n' ' ')
  echo "  $3 -> $4 $r"
done
wait
python3 -c "import json; d=json.load(open('/tmp/exp/l.json')); print('  Gbit/s', round(d['end']['sum_received']['bits_per_second']/1e9,2))"
