-- venturi schema, version 8: due times decided by the merge (debounce, throttle) and
-- supervised singletons. (Version 7 is the gated-claim functions; the two are independent.)
--
-- * burst_at / burst_run: when the current burst of merges into a pending job began, for a
--   debounce's maximum wait. A burst is the time a job is pending between two runs: it
--   begins at the job's creation (runs = 0) or at the first debounced merge after a run,
--   and it is current while burst_run = runs, so no statement that ends a run has to reset
--   it. NULL until a debounced merge needs it.
-- * venturi_job_singleton_idx: at most one live (not ended) job of a singleton kind. A
--   singleton's jobs take the slot 'venturi.singleton:<kind>' (limit 1), which is what
--   the predicate names; a worker ensures its singletons with INSERT ... ON CONFLICT DO
--   NOTHING against this index, so any number of workers starting at once create exactly
--   one.
--
-- Rolling deploy: older workers keep working. They never read or write the new columns
-- (nullable, no default: adding them rewrites nothing), their merges keep the earliest due
-- time as before, and they never create singleton jobs, so the index only constrains
-- workers of this version. A debounced burst that an older producer merges into is not
-- pushed by that merge. Creating the index reads the job table once under a write lock
-- (seconds per million rows); with a large table, create it first with
-- CREATE UNIQUE INDEX CONCURRENTLY under the same name and predicate.

ALTER TABLE venturi_job
    ADD COLUMN burst_at timestamptz,
    ADD COLUMN burst_run integer;

CREATE UNIQUE INDEX IF NOT EXISTS venturi_job_singleton_idx ON venturi_job (kind)
    WHERE slot_key LIKE 'venturi.singleton:%' AND state IN ('scheduled', 'available', 'running', 'waiting');
