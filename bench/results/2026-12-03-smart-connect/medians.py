"""medians.py FILE: per target, the medians of ab.sh's lines, and the medians
of the per-round ratios to HAProxy (`ha`) and to HAProxy with tcp-smart-connect
(`ha-sc`)."""
import collections
import statistics as st
import sys

rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 5:
        rows[p[1]].append(tuple(map(float, p[2:])))
for t, v in rows.items():
    print(f"{t:6} {len(v):2} rounds: conn/s {st.median(x[0] for x in v):7.0f}  "
          f"CPU us/conn {st.median(x[1] for x in v):6.1f}  p99 us {st.median(x[2] for x in v):6.0f}")
for ref in ("ha", "ha-sc"):
    if ref not in rows:
        continue
    for t in rows:
        if t.startswith("ha"):
            continue
        r = [(a[0] / b[0], a[1] / b[1], a[2] / b[2]) for a, b in zip(rows[t], rows[ref])]
        print(f"{t}/{ref}: conn/s {st.median(x[0] for x in r):.3f}  CPU {st.median(x[1] for x in r):.3f}  "
              f"p99 {st.median(x[2] for x in r):.3f}")
