#!/usr/bin/env bash
# run.sh NAME BENCHARGS... : perf-record PostgreSQL (postmaster and every backend it forks)
# while bench runs, and log the pids of the worker's connections every 50 ms.
set -u
name=$1; shift
cd /work/pgprof
URL=$(VENTURI_PGDATA=/tmp/pg43 scripts/pg.sh url)
export BENCH_DATABASE_URL=${URL/\/venturi\?/\/venturi_bench?}
pm=$(head -1 /tmp/pg43/postmaster.pid)
out=${PGPROF_OUT:-/tmp/pgprof}/$name
mkdir -p $out
( while :; do
    psql "$BENCH_DATABASE_URL" -Atc "select to_char(clock_timestamp(),'HH24:MI:SS.MS'), pid, application_name, backend_start, pg_current_wal_lsn() from pg_stat_activity where application_name='venturi-bench-worker'" 2>/dev/null
    sleep 0.05
  done > $out/pids.log ) &
poller=$!
sleep 0 &
perfpid=$!
sleep 1
cd bench && /tmp/vbench-pgprof -out '' "$@" > $out/bench.log 2>&1
rc=$?
kill -INT $perfpid; wait $perfpid
kill $poller
echo "bench rc=$rc"
uptime
