#!/usr/bin/env bash
# restart only pin-proxy with XP_PIPE_KB and measure
cd /work/main
restart_pin() {
  kill $(cat /tmp/exp/pin.pid) 2>/dev/null; sleep 0.3
  env "$@" target/release/pin-proxy run -c /tmp/exp/pin.yaml >/tmp/exp/pin.log 2>&1 & echo $! > /tmp/exp/pin.pid
  for i in $(seq 50); do ss -ltn | grep -q 127.0.0.1:6201 && break; sleep 0.1; done; sleep 0.5
}
for r in $(seq ${ROUNDS:-3}); do
  for kb in ${KBS:-256 1024 4096}; do
    restart_pin XP_PIPE_KB=$kb
    echo "r$r kb=$kb $(/tmp/exp/cpu.sh 6201 ${SECS:-4} ${P:-1})"
  done
  echo "r$r direct $(/tmp/exp/cpu.sh 5201 ${SECS:-4} ${P:-1})"
done
