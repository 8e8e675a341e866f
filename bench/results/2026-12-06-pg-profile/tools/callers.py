import sys, collections
sys.argv=[sys.argv[0]]+sys.argv[1:]
import os; exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'agg.py')).read().split('def main')[0])
s = parse(sys.argv[1]); pat = sys.argv[2]; depth = int(sys.argv[3]) if len(sys.argv)>3 else 4
c = collections.Counter()
for st in s:
    for i,f in enumerate(st):
        if f == pat:
            c[' < '.join(st[i:i+depth])] += 1; break
for k,v in c.most_common(15): print(v, k)
