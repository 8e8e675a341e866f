-- venturi schema, version 9: durable cron (Queue.Schedule).
--
-- * venturi_cron holds one row per schedule: its definition (cron expression, time zone,
--   the task to enqueue per fire, the missed-run policy) and its state. next_fire is the
--   earliest fire not yet handled; it only moves forward. Any worker may fire a schedule:
--   it locks the row (FOR UPDATE SKIP LOCKED), reads now() from the database, enqueues the
--   due fires and moves next_fire past them in one transaction. No worker keeps a
--   schedule in memory, so restarts, deploys and the number of workers change nothing.
-- * venturi_cron_fire is the ledger: one row per fire that enqueued (or merged into) a
--   job, keyed by (schedule, fire time) and inserted in the job's transaction, so a fire
--   time can never enqueue twice, even if next_fire were wrong. covers counts the fire
--   times it stands for (itself and the missed fires it coalesces under 'once'); skipped
--   counts the fire times before it that the policy skipped. Rows are pruned after the
--   worker's RetainCompleted, and deleted with their schedule.
--
-- Rolling deploy: workers of older versions do not know these tables and ignore the
-- schedules; only workers of this version fire them. Apply this migration before
-- deploying code that registers schedules. Nothing here touches existing tables.

CREATE TABLE venturi_cron (
    name          text        PRIMARY KEY CHECK (name <> '' AND length(name) <= 256),
    spec          text        NOT NULL CHECK (length(spec) <= 256),
    time_zone     text        NOT NULL DEFAULT 'UTC',
    kind          text        NOT NULL CHECK (kind <> '' AND length(kind) <= 128),
    queue         text        NOT NULL,
    priority      smallint    NOT NULL DEFAULT 0,
    payload       jsonb       NOT NULL,
    dedup_key     text        NOT NULL DEFAULT '',     -- '': none
    part          text,                                -- as venturi_job.part (NULL: plain)
    slot_key      text,
    slot_limit    integer,
    slot_policy   smallint,
    missed        text        NOT NULL CHECK (missed IN ('skip', 'once', 'backfill')),
    backfill      integer     NOT NULL DEFAULT 0 CHECK (backfill >= 0),
    grace_us      bigint      NOT NULL CHECK (grace_us >= 0),
    paused        boolean     NOT NULL DEFAULT false,
    next_fire     timestamptz NOT NULL,                -- earliest fire not yet handled
    last_fire     timestamptz,                         -- latest fire that enqueued a job
    last_job      uuid,
    last_run_at   timestamptz,                         -- when a worker last fired it (database time)
    fires         bigint      NOT NULL DEFAULT 0,      -- fires that enqueued or merged
    skipped       bigint      NOT NULL DEFAULT 0,      -- fire times skipped by the policy
    coalesced     bigint      NOT NULL DEFAULT 0,      -- missed fire times folded into one ('once')
    skipped_pending integer   NOT NULL DEFAULT 0,      -- skipped since the last ledger row
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),  -- the definition last changed
    paused_at     timestamptz
);

-- The due schedules, earliest first.
CREATE INDEX venturi_cron_due_idx ON venturi_cron (next_fire) WHERE NOT paused;

CREATE TABLE venturi_cron_fire (
    schedule    text        NOT NULL REFERENCES venturi_cron (name) ON DELETE CASCADE,
    fire_at     timestamptz NOT NULL,
    job_id      uuid        NOT NULL,                  -- the job enqueued, or merged into
    action      text        NOT NULL CHECK (action IN ('inserted', 'kept')),
    covers      integer     NOT NULL DEFAULT 1 CHECK (covers >= 1),
    skipped     integer     NOT NULL DEFAULT 0 CHECK (skipped >= 0),
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule, fire_at)
);

-- Retention of the ledger.
CREATE INDEX venturi_cron_fire_enqueued_idx ON venturi_cron_fire (enqueued_at);
