# attr.py SCRIPT US_PER_CONN: user-space µs per connection by the nearest pin_proxy:: frame
# (perf script output with call chains; see profile.sh).
import collections,re,sys
stacks=open(sys.argv[1]).read().split('\n\n')
per=float(sys.argv[2])
tot=0; c=collections.Counter(); k=collections.Counter()
for s in stacks:
    lines=[l.strip() for l in s.strip().split('\n')[1:]]
    if not lines: continue
    tot+=1
    kernel='[kernel.kallsyms]' in lines[0]
    fr=[re.sub(r'^[0-9a-f]+ ','',l).rsplit(' (',1)[0] for l in lines]
    fr=[re.sub(r'\+0x[0-9a-f]+$','',f) for f in fr]
    own=next((f for f in fr if f.startswith('pin_proxy::') or f.startswith('<pin_proxy::')),'(no own frame)')
    (k if kernel else c)[own[:110]]+=1
print('user total us', round(sum(c.values())/tot*per,2))
for f,v in c.most_common(30): print(f'{v/tot*per:6.2f}', f)
