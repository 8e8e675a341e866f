-- venturi schema, version 13: the operations API (issue 14). (Version 11 is unused.)
--
-- * The stats tables. The maintaining worker samples the job table every
--   Config.StatsInterval and writes what it found here; Queue.Stats and
--   Queue.StatsHistory (the dashboard, the CLI, the metrics) read only these tables and
--   never count jobs on request.
--   - venturi_stats_state: one row, the sampler's bookkeeping: when the latest sample was
--     taken (database clock), the interval until the next one (stretched when a sample is
--     slow, so sampling stays under ~5% of one backend), and counted_through: the finished
--     jobs whose finished_at is at or before it are in the finished counts.
--   - venturi_stats_kind: the latest sample per queue and kind. Pending states (available,
--     running, scheduled, waiting) are counted at every sample through their partial
--     indexes. Finished states (completed, dead, cancelled: the bulk of a large table) are
--     counted incrementally: each sample adds the jobs that finished since
--     counted_through (the finished indexes), the statements that remove finished jobs
--     (retention, bulk retry and delete) subtract what they remove in their transaction
--     (venturi_stats_forget), and a full recount every ten minutes or more corrects what
--     drifted.
--   - venturi_stats_history: one row per queue per sample, kept 24 hours, for charts.
-- * venturi_audit: one row per operator action (bulk retry, cancel and delete, queue and
--   schedule settings, circuit resets), written in the action's transaction.
-- * venturi_job_dead_idx: dead jobs by finished_at, for the dead-job listing (newest
--   first). Dead jobs are rare, so the index costs the hot path nothing: no claim,
--   enqueue or completion touches it. Creating it reads the job table once under a write
--   lock (seconds per million rows); with a large table, create it first with
--   CREATE INDEX CONCURRENTLY under the same name and predicate.
-- * venturi_ulid_floor(t, us): the smallest job ID (a ULID) minted us microseconds before t,
--   so that a listing by creation time can bound the primary key; venturi_json_text: a
--   JSON value as the filters compare it.
--
-- Rolling deploy: older workers keep working. They never read or write the new tables;
-- their retention does not subtract the jobs it deletes from the finished counts, which
-- then run high until the next recount (at most ten minutes, or the recount's stretched
-- period). Nothing here changes an existing table or function.

CREATE TABLE venturi_stats_state (
    id              boolean     PRIMARY KEY DEFAULT true CHECK (id), -- one row
    sampled_at      timestamptz,                 -- the latest sample; NULL until the first
    interval_us     bigint      NOT NULL DEFAULT 0, -- until the next sample (stretched when slow)
    sample_us       bigint      NOT NULL DEFAULT 0, -- what the latest sample took
    counted_through timestamptz,                 -- finished jobs up to this are counted
    recounted_at    timestamptz,                 -- the latest full recount of finished jobs
    recount_us      bigint      NOT NULL DEFAULT 0, -- what it took
    recount_every_us bigint     NOT NULL DEFAULT 0, -- until the next recount (stretched when slow)
    sampler         text                         -- the worker that took the latest sample
);
INSERT INTO venturi_stats_state DEFAULT VALUES;

CREATE TABLE venturi_stats_kind (
    queue             text        NOT NULL,
    kind              text        NOT NULL,
    available         bigint      NOT NULL DEFAULT 0,
    running           bigint      NOT NULL DEFAULT 0,
    scheduled         bigint      NOT NULL DEFAULT 0,
    waiting           bigint      NOT NULL DEFAULT 0,
    completed         bigint      NOT NULL DEFAULT 0,
    dead              bigint      NOT NULL DEFAULT 0,
    cancelled         bigint      NOT NULL DEFAULT 0,
    -- The failures of its unfinished jobs, summed: FailedPerSec is computed from its change.
    pending_failures  bigint      NOT NULL DEFAULT 0,
    oldest_available  timestamptz,
    completed_per_sec double precision NOT NULL DEFAULT 0,
    failed_per_sec    double precision NOT NULL DEFAULT 0,
    dead_per_sec      double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, kind)
);

CREATE TABLE venturi_stats_history (
    at                timestamptz NOT NULL, -- the sample's time (venturi_stats_state.sampled_at)
    queue             text        NOT NULL,
    available         bigint      NOT NULL,
    running           bigint      NOT NULL,
    scheduled         bigint      NOT NULL,
    waiting           bigint      NOT NULL,
    oldest_available  timestamptz,
    lag_us            bigint      NOT NULL,
    completed_per_sec double precision NOT NULL,
    failed_per_sec    double precision NOT NULL,
    dead_per_sec      double precision NOT NULL,
    PRIMARY KEY (at, queue)
);

CREATE TABLE venturi_audit (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL CHECK (octet_length(actor) <= 256),
    action text        NOT NULL CHECK (action <> '' AND octet_length(action) <= 64),
    target text        NOT NULL CHECK (octet_length(target) <= 8192),
    count  bigint      NOT NULL DEFAULT 0 CHECK (count >= 0),
    reason text        NOT NULL DEFAULT '' CHECK (octet_length(reason) <= 1024)
);

CREATE INDEX IF NOT EXISTS venturi_job_dead_idx ON venturi_job (finished_at) WHERE state = 'dead';

-- The smallest ULID (as a uuid) minted minus_us microseconds before t: uuids compare as
-- bytes, and a ULID starts with its 48-bit millisecond timestamp, so IDs >= the result were
-- minted at that time or later (by the minting clock).
CREATE FUNCTION venturi_ulid_floor(t timestamptz, minus_us bigint) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (lpad(to_hex(LEAST(GREATEST(floor(EXTRACT(EPOCH FROM t) * 1000 - minus_us / 1000.0), 0),
                              281474976710655)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;

-- venturi_stats_forget subtracts finished jobs that a statement removes from the finished
-- state (deleted, or retried back to available) from the finished counts: the jobs whose
-- finished_at is at or before counted_through, which a sample already counted. It returns
-- how many jobs it was given. The state row is share-locked so that a sample that moves
-- counted_through either sees the removal or is seen by it; the count rows are locked in
-- key order, so that concurrent callers cannot deadlock.
CREATE FUNCTION venturi_stats_forget(p_queue text[], p_kind text[], p_state text[], p_finished timestamptz[])
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_through timestamptz;
BEGIN
    IF COALESCE(cardinality(p_queue), 0) = 0 THEN
        RETURN 0;
    END IF;
    SELECT s.counted_through INTO v_through FROM venturi_stats_state s FOR SHARE;
    IF v_through IS NOT NULL THEN
        PERFORM 1 FROM venturi_stats_kind s
        WHERE (s.queue, s.kind) IN (SELECT u.q, u.k FROM unnest(p_queue, p_kind, p_state, p_finished) AS u(q, k, s, f)
                                    WHERE u.f <= v_through AND u.s IN ('completed', 'dead', 'cancelled'))
        ORDER BY s.queue, s.kind
        FOR UPDATE;
        UPDATE venturi_stats_kind s SET
            completed = GREATEST(s.completed - g.completed, 0),
            dead      = GREATEST(s.dead - g.dead, 0),
            cancelled = GREATEST(s.cancelled - g.cancelled, 0)
        FROM (SELECT u.q, u.k,
                     count(*) FILTER (WHERE u.s = 'completed') AS completed,
                     count(*) FILTER (WHERE u.s = 'dead') AS dead,
                     count(*) FILTER (WHERE u.s = 'cancelled') AS cancelled
              FROM unnest(p_queue, p_kind, p_state, p_finished) AS u(q, k, s, f)
              WHERE u.f <= v_through AND u.s IN ('completed', 'dead', 'cancelled')
              GROUP BY u.q, u.k) g
        WHERE s.queue = g.q AND s.kind = g.k;
    END IF;
    RETURN cardinality(p_queue);
END
$$;

-- venturi_json_text is the value at path p in j as a filter compares it: a string as its
-- text, any other value as its JSON text (42, true, null, {"a": 1}); NULL when absent.
CREATE FUNCTION venturi_json_text(j jsonb, p text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE jsonb_typeof(j #> p) WHEN 'string' THEN j #>> p ELSE (j #> p)::text END
$$;
