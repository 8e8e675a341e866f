-- venturi schema, version 15: the scheduled and waiting jobs indexed in their full listing
-- order, (run_at, id).
--
-- Queue.ListJobs lists scheduled and waiting jobs by due time, then ID, from a cursor.
-- Their indexes (versions 1 and 6) held run_at alone, so a page sorted every job that
-- shares its due time: jobs enqueued together with one Due (a batch, a cron backfill, an
-- import) share it to the microsecond, and the first page of 50,000 scheduled jobs due at
-- 09:00 sorted all 50,000 (30 ms at 10,000; bench/RESULTS.md scenario 14). With the ID in
-- the index a page reads a page of entries. The promoter (scheduled jobs due now become
-- available) and the waits' timeouts read the new indexes as they read the old: by run_at.
--
-- Creating an index reads the job table once under a lock that blocks writes (seconds per
-- million rows). With a large table, create both first with CREATE INDEX CONCURRENTLY
-- under the same names and predicates; the migration then only drops the old ones.
--
-- Rolling deploy: older workers keep working; no statement names an index, and each of
-- theirs that read the old index reads the new one the same way.

CREATE INDEX IF NOT EXISTS venturi_job_scheduled_due_idx ON venturi_job (run_at, id) WHERE state = 'scheduled';
DROP INDEX IF EXISTS venturi_job_scheduled_idx;

CREATE INDEX IF NOT EXISTS venturi_job_waiting_due_idx ON venturi_job (run_at, id) WHERE state = 'waiting';
DROP INDEX IF EXISTS venturi_job_waiting_idx;
