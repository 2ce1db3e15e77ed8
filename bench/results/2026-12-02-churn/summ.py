import json,sys,statistics as st
rows=[json.loads(l) for l in open(sys.argv[1])]
cases=sorted(set(r['case'] for r in rows))
for c in cases:
    for t in 'a','b','ha':
        r=[x for x in rows if x['t']==t and x['case']==c]
        k='conn_per_s' if 'churn' in c else 'rps'
        cpu='cpu_us_per_conn' if 'churn' in c else 'cpu_us_per_req'
        print(c,t,*(round(st.median(x[f] for x in r),1) for f in (k,cpu,'p99_us','p999_us')))
    # per-round ratios b/ha and a/ha
    rounds=sorted(set(x['r'] for x in rows if x['case']==c))
    for t in 'a','b':
        rat=[]
        for rr in rounds:
            g=lambda tt,f: next(x[f] for x in rows if x['case']==c and x['t']==tt and x['r']==rr)
            k='conn_per_s' if 'churn' in c else 'rps'
            rat.append("%.2f/%.2f/%.2f"%(g(t,k)/g('ha',k), g(t,'p99_us')/g('ha','p99_us'), g(t,'p999_us')/g('ha','p999_us')))
        print('  ',t,'/ha per round (rate/p99/p999):',' '.join(rat))
