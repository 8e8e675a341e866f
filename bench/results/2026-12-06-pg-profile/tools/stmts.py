import sys, collections
import os; exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'agg.py')).read().split('def main')[0])
path, lib, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = parse(path); n = len(s)
def has(st,k): return any(f==k or f=='inlined:'+k or f.endswith(':'+k) for f in st)
def cls(st):
    if has(st,'pg_plan_query'): return 'planning (custom plans at Bind)'
    if has(st,'exec_parse_message') or has(st,'pg_parse_query'): return 'parse'
    if has(st,'PortalRunSelect') and has(st,'printtup'): return 'sending result rows (printtup)'
    if has(st,'CommitTransaction') or has(st,'finish_xact_command'): return 'commit'
    if has(st,'exec_simple_query'): return 'simple queries (BEGIN, COMMIT, SET)'
    if lib == 'venturi':
        if has(st,'AfterTriggerEndQuery'): return 'claim: the AFTER trigger (started event: PL/pgSQL, SPI insert, pg_notify)'
        if has(st,'TidNext') or has(st,'ExecUpdate') or has(st,'ExecLockRows'): return 'claim (UPDATE ... WHERE ctid = ANY(... FOR UPDATE SKIP LOCKED))'
        if has(st,'ExecPostprocessPlan') or has(st,'ExecDelete') or has(st,'ExecHashJoin') or has(st,'ExecAppend') or has(st,'ExecInsert') or has(st,'CteScanNext'): return 'finish (FinishRuns: DELETE, history INSERT, CTEs)'
    else:
        if has(st,'ExecDelete') or (has(st,'PortalRunMulti') and not has(st,'FillPortalStore') and has(st,'ExecModifyTable')): return 'finish (complete_jobs: DELETE)'
        if has(st,'ExecModifyTable') or has(st,'FillPortalStore'): return 'claim (get_job: UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED))'
    if has(st,'standard_ExecutorRun') or has(st,'standard_ExecutorStart') or has(st,'standard_ExecutorEnd'): return 'other statements (executor)'
    if has(st,'exec_bind_message'): return 'bind (parameters; excl. planning)'
    if st and st[0].startswith('k:'): return 'kernel (socket, scheduling, page faults) outside statements'
    return 'other (protocol loop, idle, connection set-up)'
c = collections.Counter(cls(st) for st in s)
print(f'{path}: {n} samples = {n/997:.2f} s CPU over {jobs} jobs = {n/997/jobs*1e6:.2f} us/job (under perf)')
for k, v in c.most_common(): print(f'{100*v/n:6.2f}%  {v/997/jobs*1e6:6.2f} us/job  {k}')
