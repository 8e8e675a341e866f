-- venturi schema, version 4: a claim whose cost depends on the rows it returns, not on
-- how many kinds the worker serves.
--
-- Until now the claim ran one index scan per registered kind (index on kind, priority,
-- run_at, id), each locking up to a whole claim batch, and only then kept the best rows:
-- with 100 kinds and a batch of 1,000 it could lock 100,000 rows to return 1,000. Now
-- every job belongs to a queue (one, 'default', until named queues are exposed) and the
-- claim walks one index in claim order, (queue, priority DESC, run_at, id) over available
-- jobs, filtered by the worker's kinds, locking only the rows it takes. Priority order
-- across kinds is exact. Jobs of kinds the worker does not serve are stepped over, not
-- locked: a large backlog of such jobs in the same queue slows the claim (see the README,
-- "Claiming").
--
-- Rolling deploy: apply this migration before deploying code of this version, whose
-- enqueues name the queue column. Workers of version 3 keep working, correctly, beside it: their
-- per-kind claim can no longer use an index in claim order, so each of their claims sorts
-- the available jobs of each kind. That is slow with a large backlog: finish the rollout
-- promptly. Creating the index takes a write lock on venturi_job for as long as the build
-- lasts (seconds per million rows); with a large table, create it first with CREATE INDEX
-- CONCURRENTLY under the same name and the migration will reuse it.

ALTER TABLE venturi_job
    ADD COLUMN queue text NOT NULL DEFAULT 'default'
        CONSTRAINT venturi_job_queue_check CHECK (queue <> '' AND length(queue) <= 128);

CREATE INDEX IF NOT EXISTS venturi_job_claim_queue_idx
    ON venturi_job (queue, priority DESC, run_at, id) WHERE state = 'available';

DROP INDEX venturi_job_claim_idx;
