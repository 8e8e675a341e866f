import sys
from datetime import datetime
rows = {}
for l in open(sys.argv[1]):
    p = l.strip().split('|')
    if len(p) < 4: continue
    rows[p[1]] = datetime.fromisoformat(p[3].replace('+00','+00:00'))
labels = sys.argv[2].split(',')
items = sorted(rows.items(), key=lambda x: x[1])
segs = []; last = None
for pid, t in items:
    if last is None or (t - last).total_seconds() > 3: segs.append([])
    segs[-1].append(pid); last = t
for i, s in enumerate(segs):
    print(labels[i] if i < len(labels) else f'seg{i}', ','.join(s))
