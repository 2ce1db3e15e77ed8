#!/usr/bin/env bash
# profile.sh SECS: where a churned connection's CPU goes in each proxy, by
# system call. Client-first churn over two targets, as bench/run.sh's
# churn_cf (32 loops, 64 B), through pin-proxy, then HAProxy, each for
# SECS + 2 s with `perf record -g` on the proxy for SECS in the middle.
# Prints CPU µs per connection split into kernel and user space, and the
# inclusive µs per connection of each system call, of the softirq work
# done inside them (the loopback receive path of the segments the proxy
# sends, run in its context), of scheduling and of a few kernel functions.
# perf slows both proxies: compare the two, not these figures with
# bench/run.sh's. Run from the repository root as root; PIN=BIN (default
# target/release/pin-proxy).
set -euo pipefail
# shellcheck source=bench/configs.sh
. bench/configs.sh
scratch
S=$1
mapfile -t p < <("$LG" free-ports 6)
"$LG" echo-server --listen "127.0.0.1:${p[0]}" --also-listen "127.0.0.1:${p[1]}" >/dev/null 2>&1 &
pin_config "$D/pin.yaml" "$PIN" "a:${p[2]}:${p[0]}" "b:${p[3]}:${p[1]}"
haproxy_config "$D/ha.cfg" 2 9000 "a:${p[4]}:${p[0]}" "b:${p[5]}:${p[1]}"
start_proxies
pin=$PID_PIN ha=$PID_HA
sleep 1.5
one() { # NAME PID PORT PORT
    nice -n -10 "$LG" churn --target "127.0.0.1:$3" --also-target "127.0.0.1:$4" --concurrency 32 \
        --size 64 --duration $((S + 2)) --warmup 0.5 --pid "$2" --client-closes >"$D/$1.json" 2>/dev/null &
    local w=$!
    sleep 1.5
    perf record -q -g -p "$2" -o "$D/$1.data" -- sleep "$S" >/dev/null 2>&1
    wait "$w"
    perf report -i "$D/$1.data" --children --sort dso,sym --stdio -g none 2>/dev/null >"$D/$1.txt"
}
one pin-proxy "$pin" "${p[2]}" "${p[3]}"
one haproxy "$ha" "${p[4]}" "${p[5]}"
python3 - "$D" <<'PY'
import json, re, sys
d = sys.argv[1]
CALLS = ["do_syscall_64", "__x64_sys_sendto", "__x64_sys_connect", "__x64_sys_close",
         "__x64_sys_shutdown", "__x64_sys_epoll_ctl", "__x64_sys_epoll_wait",
         "__x64_sys_recvfrom", "__x64_sys_accept4", "__x64_sys_socket",
         "__x64_sys_setsockopt", "__x64_sys_write", "__x64_sys_clock_gettime",
         "__x64_sys_fcntl", "handle_softirqs", "ep_remove", "__schedule",
         "try_to_wake_up", "__inet_hash_connect"]
res = {}
for name in ("pin-proxy", "haproxy"):
    run = json.load(open(f"{d}/{name}.json"))
    per = run["cpu_us_per_conn"] / 100
    incl, kernel = {}, 0.0
    for line in open(f"{d}/{name}.txt"):
        m = re.match(r"\s*([\d.]+)%\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        children, self_, dso, kind, sym = m.groups()
        incl[sym.strip()] = float(children) * per
        if kind == "k":
            kernel += float(self_) * per
    res[name] = (run, incl, kernel)
pr, ha = res["pin-proxy"], res["haproxy"]
print(f"| per connection, µs | pin-proxy | HAProxy | difference |")
print("|---|---:|---:|---:|")
for label, f in (("conn/s (under perf)", lambda r: r[0]["conn_per_s"]),
                 ("CPU", lambda r: r[0]["cpu_us_per_conn"]),
                 ("kernel (self time)", lambda r: r[2]),
                 ("user space", lambda r: r[0]["cpu_us_per_conn"] - r[2])):
    a, b = f(pr), f(ha)
    print(f"| {label} | {a:.2f} | {b:.2f} | {a - b:+.2f} |")
for c in CALLS:
    a, b = pr[1].get(c, 0.0), ha[1].get(c, 0.0)
    print(f"| `{c}` (inclusive) | {a:.2f} | {b:.2f} | {a - b:+.2f} |")
PY
