#!/usr/bin/env python3
"""events_split.py SCRIPT JOBS: where scenario 13's events-on backend time goes (µs per job at
the sampling rate, 997 Hz): the claim's AFTER UPDATE trigger (started event) split into its
SPI INSERT (executor start/end, heap insert, index inserts, the rest), its PERFORM pg_notify
(of which md5 in venturi_events_channel()), the PL/pgSQL rest; and FinishRuns' post-processed
data-modifying CTEs (history insert, and the completed event's insert when events are on)."""
import sys
import os; exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'agg.py')).read().split('def main')[0])
s = parse(sys.argv[1]); jobs = int(sys.argv[2]); n = len(s)
def has(st, k): return k in st or 'inlined:'+k in st or 'plpgsql:'+k in st
def us(c): return round(c/997/jobs*1e6, 2)
def cnt(cond, ss=s): return sum(1 for st in ss if cond(st))
print('all', us(n), 'us/job')
trig = [st for st in s if has(st, 'AfterTriggerEndQuery')]
print('claim AFTER trigger (AfterTriggerEndQuery)', us(len(trig)))
ins = lambda st: has(st, 'exec_stmt_execsql')
print('  SPI INSERT INTO venturi_event', us(cnt(ins, trig)))
print('    executor start/end per row', us(cnt(lambda st: ins(st) and (has(st, 'standard_ExecutorStart') or has(st, 'standard_ExecutorEnd')), trig)))
print('    heap_insert', us(cnt(lambda st: ins(st) and has(st, 'heap_insert'), trig)))
print('    index inserts (pkey (xid, seq), at)', us(cnt(lambda st: ins(st) and has(st, 'ExecInsertIndexTuples'), trig)))
print('    rest (identity nextval, pg_current_xact_id, projection, ExecInsert, SPI)', us(cnt(lambda st: ins(st) and not (has(st, 'standard_ExecutorStart') or has(st, 'standard_ExecutorEnd') or has(st, 'heap_insert') or has(st, 'ExecInsertIndexTuples')), trig)))
perf_ = lambda st: has(st, 'exec_stmt_perform')
print('  PERFORM pg_notify(venturi_events_channel(), \'\')', us(cnt(perf_, trig)))
print('    md5 in venturi_events_channel()', us(cnt(lambda st: perf_(st) and has(st, 'md5_text'), trig)))
print('    Async_Notify (the queueing, deduplicated)', us(cnt(lambda st: perf_(st) and has(st, 'Async_Notify'), trig)))
print('  PL/pgSQL and trigger machinery (the rest)', us(cnt(lambda st: not perf_(st) and not ins(st), trig)))
print('FinishRuns post-processed CTEs (ExecPostprocessPlan)', us(cnt(lambda st: has(st, 'ExecPostprocessPlan'))))
print('commit (PreCommit_Notify, AtCommit_Notify included)', us(cnt(lambda st: has(st, 'CommitTransaction'))))
print('  NOTIFY at commit', us(cnt(lambda st: has(st, 'PreCommit_Notify') or has(st, 'AtCommit_Notify') or has(st, 'SignalBackends'))))
