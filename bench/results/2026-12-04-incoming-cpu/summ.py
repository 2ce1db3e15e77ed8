import sys, statistics as st
from collections import defaultdict
rows=[l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith('{')]
by=defaultdict(dict)
for r,t,c,cpu,p99 in rows: by[int(r)][t]=(float(c),float(cpu),float(p99))
ts=sorted({t for d in by.values() for t in d})
for t in ts:
    if t=='ha': continue
    rc=[by[r][t][0]/by[r]['ha'][0] for r in by if t in by[r] and 'ha' in by[r]]
    ru=[by[r][t][1]/by[r]['ha'][1] for r in by if t in by[r] and 'ha' in by[r]]
    rp=[by[r][t][2]/by[r]['ha'][2] for r in by if t in by[r] and 'ha' in by[r]]
    print(t, 'conn/s', round(st.median(rc),3), [round(x,2) for x in rc])
    print(t, 'cpu   ', round(st.median(ru),3), [round(x,2) for x in ru])
    print(t, 'p99   ', round(st.median(rp),3), [round(x,2) for x in rp])
