-- venturi schema, version 5: a terminal state for jobs that end without running to an
-- outcome of their own.
--
-- 'cancelled' is the state of a job that a slot policy ended: DropIfRunning drops a job
-- that became runnable while its slot was full, and Replace ends the running job that a
-- newer one replaced (see version 6). Neither is a failure. The value gets its own
-- migration because a new enum value cannot be used in the transaction that adds it.
--
-- Rolling deploy: workers of version 4 keep working. They never write the new state; a
-- cancelled job is terminal for them too (they only claim available jobs), but their
-- retention does not prune it: version-6 workers do.

ALTER TYPE venturi_job_state ADD VALUE IF NOT EXISTS 'cancelled';
