-- venturi schema, version 1.
--
-- A job is one row. Its journal (one entry per finished run, plus merge records) lives in
-- the same row as a jsonb array, so finishing a run is a single-row UPDATE with no extra
-- index insert. Terminal rows are pruned by the worker's maintenance loop.

CREATE TYPE venturi_job_state AS ENUM (
    'scheduled', -- pending, due in the future (run_at > now())
    'available', -- pending and due: claimable
    'running',   -- claimed under a lease; lease_token fences every write for this run
    'completed', -- terminal: a handler returned Completed
    'dead'       -- terminal: permanent error, undecodable payload or backstop reached
);

CREATE SEQUENCE venturi_lease_token_seq AS bigint CACHE 64;

CREATE TABLE venturi_job (
    id               uuid              PRIMARY KEY,           -- a ULID's 16 bytes
    kind             text              NOT NULL CHECK (kind <> '' AND length(kind) <= 128),
    state            venturi_job_state NOT NULL,
    priority         smallint          NOT NULL DEFAULT 0,    -- higher runs first
    dedup_key        text,                                    -- NULL: never coalesced
    payload          jsonb             NOT NULL,
    carry            jsonb,                                   -- NULL: the carry type's zero value
    run_at           timestamptz       NOT NULL,              -- when the job is (or was) due
    runs             integer           NOT NULL DEFAULT 0,    -- executions started, including the current one
    failures         integer           NOT NULL DEFAULT 0,    -- failed executions (the backstop counts these)
    max_failures     integer           NOT NULL DEFAULT 0,    -- backstop of the claiming worker; 0 = none
    lease_token      bigint,                                  -- fencing token of the current run
    lease_expires_at timestamptz,
    worker_id        text,
    attempted_at     timestamptz,                             -- start of the current or last run
    journal          jsonb             NOT NULL DEFAULT '[]',
    created_at       timestamptz       NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    CONSTRAINT venturi_job_running_has_lease CHECK (
        (state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- Claim: per kind, most urgent first, then due time, then ID.
CREATE INDEX venturi_job_claim_idx ON venturi_job (kind, priority DESC, run_at, id)
    WHERE state = 'available';
-- Promotion of scheduled jobs that came due.
CREATE INDEX venturi_job_scheduled_idx ON venturi_job (run_at) WHERE state = 'scheduled';
-- Dedup candidates: pending jobs by (kind, dedup_key). Not unique: Merge Independent
-- lets two pending jobs share a key; enqueues of one key are serialized by an advisory lock.
CREATE INDEX venturi_job_dedup_idx ON venturi_job (kind, dedup_key, id)
    WHERE dedup_key IS NOT NULL AND state IN ('scheduled', 'available');
-- Rescue of expired leases.
CREATE INDEX venturi_job_lease_idx ON venturi_job (lease_expires_at) WHERE state = 'running';
-- Retention.
CREATE INDEX venturi_job_finished_idx ON venturi_job (finished_at) WHERE state IN ('completed', 'dead');

-- A queue table is updated constantly: vacuum it far more often than the default 20% of
-- its rows, but in proportion to its size, so a large backlog is not rescanned endlessly.
ALTER TABLE venturi_job SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_analyze_threshold = 5000,
    fillfactor = 90
);
