-- venturi schema, version 10: lifecycle events (a durable stream any process reads with a
-- cursor) and job metadata. (Version 9 is durable cron; the two are independent.)
--
-- * venturi_job.events: the job opted in to the durable event stream. Decided at enqueue
--   (a task's StreamEvents method, QueueConfig.StreamEvents or the StreamEvents option)
--   and kept on the row, so the statements that change the job need not know.
-- * venturi_job.meta: the job's metadata (a JSON object of strings, at most 8 KiB):
--   trace context, tenant, set at enqueue by an option or enqueue middleware and handed
--   to the run (work middleware reads it).
-- * venturi_event: the stream. A trigger on venturi_job writes a row for every
--   transition of an opted-in job in the statement that makes it (enqueue, merge, claim,
--   each run's end, rescue, release, cancel, the wake of a waiting job), so the stream
--   never shows a transition that did not commit and never misses one that did. Jobs
--   that did not opt in cost the triggers' WHEN test (one column) and nothing else.
--   Each row stores its writer's transaction ID (xid8). A reader returns only rows whose
--   xid is below the oldest transaction still running (pg_snapshot_xmin), ordered by
--   (xid, seq): every transaction that could still add a row below its cursor has ended,
--   so a cursor (xid, seq) misses nothing and repeats nothing even when transactions
--   commit out of the order of their sequence numbers. The price is latency: an event is
--   readable once every transaction older than its own has ended (bounded by the longest
--   open transaction in the cluster).
-- * Each write notifies the channel venturi_events_channel() names (the schema's), which
--   wakes Queue.WaitEvents.
--
-- Rolling deploy: older workers keep working. Their inserts leave events false and meta
-- NULL (no events for their jobs), and every statement they run on jobs that opted in
-- (claims, ends, rescues) is covered by the trigger, so the stream stays complete for those
-- jobs. Adding the columns rewrites nothing (a constant default, a nullable column); the
-- size check is NOT VALID (every existing row has NULL meta).

ALTER TABLE venturi_job
    ADD COLUMN events boolean NOT NULL DEFAULT false,
    ADD COLUMN meta jsonb;

ALTER TABLE venturi_job ADD CONSTRAINT venturi_job_meta_size
    CHECK (meta IS NULL OR (jsonb_typeof(meta) = 'object' AND octet_length(meta::text) <= 8192)) NOT VALID;

CREATE TABLE venturi_event (
    xid       xid8        NOT NULL DEFAULT pg_current_xact_id(), -- the writing transaction
    seq       bigint      GENERATED ALWAYS AS IDENTITY,
    at        timestamptz NOT NULL DEFAULT now(),               -- the writing transaction's time
    job_id    uuid        NOT NULL,
    kind      text        NOT NULL,
    queue     text        NOT NULL,
    event     text        NOT NULL,
    run       integer     NOT NULL DEFAULT 0,
    state     text        NOT NULL,                             -- the job's state after the event
    note      text,
    worker    text,
    started_at timestamptz,                                     -- the run's start (claim time)
    run_at    timestamptz,                                      -- the job's due time after the event
    delay_us  bigint,                                           -- a pause's or retry's delay, a wait's timeout
    meta      jsonb,                                            -- the job's metadata
    PRIMARY KEY (xid, seq)
);

-- Retention: the maintainer deletes old events in batches.
CREATE INDEX venturi_event_at_idx ON venturi_event (at);

ALTER TABLE venturi_event SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_vacuum_insert_threshold = 1000
);

-- The channel that wakes event readers of this schema (an identifier of 47 bytes).
CREATE FUNCTION venturi_events_channel() RETURNS text
LANGUAGE sql STABLE AS $$ SELECT 'venturi_events_' || md5(current_schema()) $$;

CREATE FUNCTION venturi_event_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_len bigint;
    new_len bigint;
    added   bigint;
    n       int;
    wrote   boolean := false;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO venturi_event (job_id, kind, queue, event, run, state, run_at, meta)
        VALUES (NEW.id, NEW.kind, NEW.queue, 'enqueued', NEW.runs, NEW.state::text, NEW.run_at, NEW.meta);
    ELSE
        n := jsonb_array_length(NEW.journal);
        old_len := OLD.journal_moved + jsonb_array_length(OLD.journal);
        new_len := NEW.journal_moved + n;
        added := new_len - old_len;
        IF OLD.state = 'running' AND NEW.runs < OLD.runs THEN
            -- Claimed, never started: returned at shutdown or from a paused queue (and
            -- ended cancelled, below, when it was asked to stop meanwhile). Not a run.
            INSERT INTO venturi_event (job_id, kind, queue, event, run, state, worker, run_at, meta)
            VALUES (NEW.id, NEW.kind, NEW.queue, 'released', OLD.runs, NEW.state::text, OLD.worker_id, NEW.run_at, NEW.meta);
            wrote := true;
        END IF;
        IF added > 0 THEN
            -- The entries this update appended (merged, a run's end, a rescue, a cancel), in order.
            INSERT INTO venturi_event (job_id, kind, queue, event, run, state, note, worker, started_at, run_at, delay_us, meta)
            SELECT NEW.id, NEW.kind, NEW.queue, COALESCE(e.entry->>'event', '?'),
                   COALESCE((e.entry->>'run')::int, NEW.runs), NEW.state::text,
                   left(e.entry->>'note', 1024), e.entry->>'worker', (e.entry->>'started_at')::timestamptz,
                   NEW.run_at, ((e.entry->>'resume_in')::bigint / 1000), NEW.meta
            FROM jsonb_array_elements(NEW.journal) WITH ORDINALITY AS e(entry, ord)
            WHERE e.ord > n - added
            ORDER BY e.ord;
            wrote := true;
        ELSIF OLD.state = 'available' AND NEW.state = 'running' THEN
            INSERT INTO venturi_event (job_id, kind, queue, event, run, state, worker, started_at, run_at, meta)
            VALUES (NEW.id, NEW.kind, NEW.queue, 'started', NEW.runs, 'running', NEW.worker_id, NEW.attempted_at, NEW.run_at, NEW.meta);
            wrote := true;
        ELSIF OLD.state = 'waiting' AND NEW.state = 'available' THEN
            -- A signal it waited for arrived, or its wait timed out.
            INSERT INTO venturi_event (job_id, kind, queue, event, run, state, run_at, meta)
            VALUES (NEW.id, NEW.kind, NEW.queue, 'woken', NEW.runs, 'available', NEW.run_at, NEW.meta);
            wrote := true;
        END IF;
        IF NOT wrote THEN
            RETURN NULL; -- a promotion (scheduled to available): not an event
        END IF;
    END IF;
    PERFORM pg_notify(venturi_events_channel(), '');
    RETURN NULL;
END
$$;

CREATE TRIGGER venturi_event_insert
    AFTER INSERT ON venturi_job
    FOR EACH ROW WHEN (NEW.events)
    EXECUTE FUNCTION venturi_event_write();

-- Updates of other columns (lease extensions, checkpoints) do not fire it; the journal
-- move (migration 3) changes journal but not its total length, and writes nothing here.
CREATE TRIGGER venturi_event_update
    AFTER UPDATE OF state, journal ON venturi_job
    FOR EACH ROW WHEN (NEW.events AND (OLD.state IS DISTINCT FROM NEW.state
        OR OLD.journal_moved + jsonb_array_length(OLD.journal) <> NEW.journal_moved + jsonb_array_length(NEW.journal)))
    EXECUTE FUNCTION venturi_event_write();
