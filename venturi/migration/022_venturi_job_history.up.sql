-- venturi schema, version 22: a table for finished jobs, and one view of every job.
--
-- venturi_job_history holds jobs that ended (completed, dead, cancelled), each with the
-- time it may be pruned (prune_at: when it finished plus the retention of its state), range
-- partitioned on that time. Finished jobs leave venturi_job for it, so that the table
-- claims, finishes and vacuums stays the size of the work in flight, and retention drops
-- whole partitions instead of deleting rows. Its partitions are created ahead, and dropped
-- once past, by the worker that holds the retention duty; none exist before that.
--
-- venturi_job_all is venturi_job and venturi_job_history in one relation: a statement that
-- reads a job wherever it is reads this view, and sees each job exactly once, in one
-- snapshot, also while it moves (a move is a delete and an insert in one transaction).
-- Columns only live jobs have (the lease, the awaiters' channel, the signals a job waits
-- for, the claim's virtual time) are NULL for finished ones; in_history says which table a
-- row is in, and a statement that asks for one (in_history or NOT in_history) reads only
-- that table (the planner drops the other branch).
--
-- What moves a job: the finish of a run that ends it (FinishRuns, for completed, dead and
-- cancelled results), and the retention duty's sweep of the jobs that ended in
-- venturi_job some other way (a rescue past the backstop, a cancel, an older worker's
-- finish). A job whose state is kept for no time is deleted instead of moved. A bulk
-- retry moves a finished job back.
--
-- The delete triggers of venturi_job (venturi_journal_delete, venturi_job_extras_delete)
-- are dropped: a move deletes the row, and must keep the job's moved journal entries,
-- signals, hooks and steps. What a deleted or pruned job leaves there is deleted by the
-- retention duty's sweep of those tables instead (entries whose job is in neither table).
--
-- Rolling deploy: older workers keep working. Their finishes update rows in venturi_job as
-- before and the sweep moves the ended ones; their prune deletes ended rows without the
-- delete triggers, whose work the orphan sweep does. Their Queue.Job, listings and stats
-- read venturi_job alone: until every worker and producer runs this version, they do not
-- see the jobs that moved (a finished job reads as not found).
CREATE TABLE venturi_job_history (
    id                uuid              NOT NULL,
    kind              text              NOT NULL,
    state             venturi_job_state NOT NULL,
    priority          smallint          NOT NULL,
    dedup_key         text,
    payload           jsonb             NOT NULL,
    carry             jsonb,
    run_at            timestamptz       NOT NULL,
    runs              integer           NOT NULL,
    failures          integer           NOT NULL,
    max_failures      integer           NOT NULL,
    worker_id         text,
    attempted_at      timestamptz,
    journal           jsonb             NOT NULL,
    created_at        timestamptz       NOT NULL,
    finished_at       timestamptz       NOT NULL,
    journal_moved     bigint            NOT NULL,
    journal_dropped   jsonb,
    queue             text              NOT NULL,
    part              text,
    slot_key          text,
    slot_limit        integer,
    slot_policy       smallint,
    breaker           text,
    stop_requested_at timestamptz,
    stop_event        text,
    stop_note         text,
    events            boolean           NOT NULL,
    meta              jsonb,
    prune_at          timestamptz       NOT NULL,
    CONSTRAINT venturi_job_history_state_check CHECK (state IN ('completed', 'dead', 'cancelled'))
) PARTITION BY RANGE (prune_at);

-- A job by ID (every partition is probed: the ID is not the partition key), and the
-- finished jobs of a state newest first (the listing, the stats' window of recent ends).
CREATE INDEX venturi_job_history_id_idx ON venturi_job_history (id);
CREATE INDEX venturi_job_history_finished_idx ON venturi_job_history (state, finished_at, id);

CREATE VIEW venturi_job_all AS
SELECT j.id, j.kind, j.state, j.priority, j.dedup_key, j.payload, j.carry, j.run_at, j.runs, j.failures,
       j.max_failures, j.lease_token, j.lease_expires_at, j.worker_id, j.attempted_at, j.journal,
       j.created_at, j.finished_at, j.journal_moved, j.journal_dropped, j.queue, j.part, j.slot_key,
       j.slot_limit, j.slot_policy, j.breaker, j.stop_requested_at, j.stop_event, j.stop_note,
       j.await_channel, j.wait_signals, j.events, j.meta, false AS in_history
FROM venturi_job j
UNION ALL
SELECT h.id, h.kind, h.state, h.priority, h.dedup_key, h.payload, h.carry, h.run_at, h.runs, h.failures,
       h.max_failures, NULL::bigint, NULL::timestamptz, h.worker_id, h.attempted_at, h.journal,
       h.created_at, h.finished_at, h.journal_moved, h.journal_dropped, h.queue, h.part, h.slot_key,
       h.slot_limit, h.slot_policy, h.breaker, h.stop_requested_at, h.stop_event, h.stop_note,
       NULL::text, NULL::text[], h.events, h.meta, true AS in_history
FROM venturi_job_history h;

-- The partitions of venturi_job_history: name and bounds, maintained with the partitions
-- themselves (venturi_history_extend, venturi_history_drop). Where the newest ends is the
-- horizon: a finish clamps a prune time beyond it to just below it, so that a job always has
-- a partition to go to (it is then pruned sooner than asked, which only happens when
-- partitions have not been created ahead for as long as a retention: the worker logs it).
CREATE TABLE venturi_history_partition (
    name text        NOT NULL PRIMARY KEY,
    lo   timestamptz NOT NULL,
    hi   timestamptz NOT NULL,
    CONSTRAINT venturi_history_partition_bounds CHECK (lo < hi)
);
CREATE INDEX venturi_history_partition_hi_idx ON venturi_history_partition (hi);

-- Creates partitions of p_width after the newest one (the first starts at now, rounded
-- down to a multiple of p_width) until one ends at or after p_until, and returns how many
-- it created. Each is made alone and attached (SHARE UPDATE EXCLUSIVE on the parent: finishes
-- inserting and readers go on; CREATE TABLE ... PARTITION OF would lock them out), under
-- lock_timeout p_lock_timeout_ms. Callers serialize on an advisory lock taken here.
CREATE FUNCTION venturi_history_extend(p_width interval, p_until timestamptz, p_lock_timeout_ms int)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_hi   timestamptz;
    v_w    double precision := extract(epoch FROM p_width);
    v_name text;
    n      int := 0;
BEGIN
    IF v_w < 1 THEN
        RAISE EXCEPTION 'venturi: history partition width % is under a second', p_width;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_history', 0));
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true);
    SELECT max(hi) INTO v_hi FROM venturi_history_partition;
    IF v_hi IS NULL THEN
        v_hi := to_timestamp(floor(extract(epoch FROM now()) / v_w) * v_w);
    END IF;
    WHILE v_hi < p_until LOOP
        v_name := 'venturi_job_history_' || to_char(v_hi AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
        EXECUTE format('CREATE TABLE %I (LIKE venturi_job_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS, '
                       'CHECK (prune_at >= %L AND prune_at < %L)) WITH (autovacuum_freeze_min_age = 0)',
                       v_name, v_hi, v_hi + p_width);
        EXECUTE format('ALTER TABLE venturi_job_history ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_hi, v_hi + p_width);
        INSERT INTO venturi_history_partition (name, lo, hi) VALUES (v_name, v_hi, v_hi + p_width);
        v_hi := v_hi + p_width;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Drops the oldest partition whose jobs are all past their prune time (its upper bound at
-- or before p_now), and returns its name (NULL: none is due). The jobs it holds are taken
-- out of the stats' finished counts first, in the same transaction (those counted, that is,
-- finished at or before the stats' counted_through). DROP locks the parent table, which
-- finishes insert into: it waits p_lock_timeout_ms at most (55P03, and the transaction's
-- work is undone: the next round tries again). The jobs' moved journal entries, signals,
-- hooks and steps are left to the orphan sweep.
CREATE FUNCTION venturi_history_drop(p_now timestamptz, p_lock_timeout_ms int)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_name      text;
    v_through   timestamptz;
    v_q         text[];
    v_k         text[];
    v_completed bigint[];
    v_dead      bigint[];
    v_cancelled bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_history', 0));
    SELECT p.name INTO v_name FROM venturi_history_partition p WHERE p.hi <= p_now ORDER BY p.hi LIMIT 1;
    IF v_name IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true);
    -- No write (a bulk retry or delete) changes the partition while it is counted.
    EXECUTE format('LOCK TABLE %I IN SHARE MODE', v_name);
    SELECT s.counted_through INTO v_through FROM venturi_stats_state s FOR SHARE;
    IF v_through IS NOT NULL THEN
        EXECUTE format('SELECT array_agg(g.q), array_agg(g.k), array_agg(g.c), array_agg(g.d), array_agg(g.x) FROM ('
                       'SELECT queue AS q, kind AS k, count(*) FILTER (WHERE state = ''completed'') AS c, '
                       'count(*) FILTER (WHERE state = ''dead'') AS d, count(*) FILTER (WHERE state = ''cancelled'') AS x '
                       'FROM %I WHERE finished_at <= $1 GROUP BY queue, kind) g', v_name)
            INTO v_q, v_k, v_completed, v_dead, v_cancelled USING v_through;
        IF v_q IS NOT NULL THEN
            -- In the stats' lock order (venturi_stats_forget): rows by queue and kind.
            PERFORM 1 FROM venturi_stats_kind s
            WHERE (s.queue, s.kind) IN (SELECT u.q, u.k FROM unnest(v_q, v_k) AS u(q, k))
            ORDER BY s.queue, s.kind
            FOR UPDATE;
            UPDATE venturi_stats_kind s SET
                completed = GREATEST(s.completed - g.c, 0),
                dead      = GREATEST(s.dead - g.d, 0),
                cancelled = GREATEST(s.cancelled - g.x, 0)
            FROM unnest(v_q, v_k, v_completed, v_dead, v_cancelled) AS g(q, k, c, d, x)
            WHERE s.queue = g.q AND s.kind = g.k;
        END IF;
    END IF;
    EXECUTE format('DROP TABLE %I', v_name);
    DELETE FROM venturi_history_partition WHERE name = v_name;
    RETURN v_name;
END
$$;

DROP TRIGGER venturi_journal_delete ON venturi_job;
DROP TRIGGER venturi_job_extras_delete ON venturi_job;
DROP FUNCTION venturi_journal_delete();
DROP FUNCTION venturi_job_extras_delete();

-- The event of a job inserted into venturi_job: enqueued, or retried when a bulk retry
-- moved a finished job back from the history (the rest unchanged).
CREATE OR REPLACE FUNCTION venturi_event_write()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    old_len bigint;
    new_len bigint;
    added   bigint;
    n       int;
    wrote   boolean := false;
BEGIN
    IF TG_OP = 'INSERT' AND NEW.runs > 0 AND NEW.journal->-1->>'event' = 'retried' THEN
        -- A finished job a bulk retry moved back from venturi_job_history.
        INSERT INTO venturi_event (job_id, kind, queue, event, run, state, note, run_at, meta)
        VALUES (NEW.id, NEW.kind, NEW.queue, 'retried', NEW.runs, NEW.state::text,
                left(NEW.journal->-1->>'note', 1024), NEW.run_at, NEW.meta);
    ELSIF TG_OP = 'INSERT' THEN
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
$function$;
