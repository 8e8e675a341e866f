-- venturi schema, version 5: the states 'cancelled' and 'waiting'.
--
-- 'cancelled' is terminal and not a failure: a job cancelled by Queue.Cancel or by its own
-- handler, a job a slot policy ended (DropIfRunning drops a job that became runnable while
-- its slot was full; Replace ends the running job that a newer one replaced).
--
-- 'waiting' is the state of a job whose run returned WaitForSignal: it is claimable again
-- when a signal it waits for arrives, or when its timeout (run_at) passes.
--
-- The values get their own migration because a new enum value cannot be used in the
-- transaction that adds it.
--
-- Rolling deploy: workers of version 4 keep working. They never write the new states; a
-- cancelled job is terminal for them too and a waiting one is not theirs to claim (they
-- only claim available jobs), but their retention does not prune cancelled jobs: version-6
-- workers do.

ALTER TYPE venturi_job_state ADD VALUE IF NOT EXISTS 'cancelled';
ALTER TYPE venturi_job_state ADD VALUE IF NOT EXISTS 'waiting';
