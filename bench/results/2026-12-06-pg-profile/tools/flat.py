#!/usr/bin/env python3
"""flat.py SCRIPT MODE: a perf-report-like flat list from `perf script -F pid,ip,sym,dso`
(dwarf callchains, inlined frames shown as 'inlined:NAME'). MODE self: the leaf frame (perf
report --no-children --sort dso,symbol); children: every distinct frame on the stack (perf
report --children --sort symbol)."""
import sys, collections
import os; exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'agg.py')).read().split('def main')[0])
s = parse(sys.argv[1]); mode = sys.argv[2]; n = len(s)
c = collections.Counter()
for st in s:
    if not st: continue
    if mode == 'self': c[st[0]] += 1
    else:
        for f in set(st): c[f] += 1
print(f'# {n} samples ({mode}); frames: postgres symbols bare, k: kernel, LIB: shared library, inlined: an inlined frame')
for k, v in c.most_common():
    if 100*v/n < (0.05 if mode == 'self' else 0.3): break
    print(f'{100*v/n:7.2f}%  {v:6d}  {k}')
