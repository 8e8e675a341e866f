import sys, collections
import os; exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'agg.py')).read().split('def main')[0])
s = parse(sys.argv[1]); root = sys.argv[2]; minpct = float(sys.argv[3]); maxd = int(sys.argv[4])
n = len(s)
SKIP = {'ExecProcNode','ExecProcNodeFirst','inlined:ExecProcNode','inlined:ExecScanFetch','ExecScanFetch','inlined:ExecEvalExpr','inlined:ExecProject','inlined:ExecQual','inlined:ExecEvalExprSwitchContext','inlined:MultiExecProcNode','MultiExecProcNode','ExecScan','inlined:ExecScanExtended'}
tree = {}
for st in s:
    fr = list(reversed(st))
    if root not in fr: continue
    fr = fr[fr.index(root):]
    fr = [f for f in fr if f not in SKIP]
    node = tree
    for f in fr[:maxd]:
        e = node.setdefault(f, [0, {}]); e[0] += 1; node = e[1]
def pr(node, d):
    for k, (c, ch) in sorted(node.items(), key=lambda x: -x[1][0]):
        if 100*c/n < minpct: continue
        print(f'{100*c/n:6.2f}% ' + '  '*d + k)
        pr(ch, d+1)
pr(tree, 0)
