-- venturi schema, version 24: the history of finished jobs in one partition lane per
-- retention, each with partitions as wide as its own retention asks.
--
-- venturi_job_history was one range of partitions on prune_at. A partition holds the jobs
-- that become prunable in its span, and every span is reached by both retentions in turn:
-- the jobs that complete now and the jobs that died RetainDead ago become prunable in the
-- same minutes. One width therefore served both: with RetainCompleted 30s and RetainDead
-- 7 days, the partitions were 2h37m wide (the longer over 64, to bound their number), and a
-- completed job was kept for up to 2h37m instead of 30 s (bench/FINDINGS.md section 20: the
-- sustained scenario's history grew from 687 to 3,147 MiB in ten minutes).
--
-- venturi_job_history is now partitioned by list on its lane, and each lane by range on
-- prune_at, with partitions of its own width:
--
--   lane 1  venturi_job_history_completed  completed and cancelled jobs (RetainCompleted)
--   lane 2  venturi_job_history_dead       dead jobs (RetainDead)
--   lane 0  venturi_job_history_mixed      the history as it was, in a database that had
--                                          one: its partitions are dropped as they come
--                                          due, and the lane itself once they are all gone
--                                          (venturi_history_drop); in a new database it
--                                          does not exist.
--
-- A job's lane follows from its state (the partition key is COALESCE(lane, 2 for dead, 1
-- otherwise); the lane column is 0 in the mixed lane and NULL elsewhere), so an insert
-- names none: a finish, the retention sweep and an older worker's insert all land in the
-- lane of the job's state. The statements that read or delete finished jobs read
-- venturi_job_history (or venturi_job_all) and see every lane. venturi_history_extend
-- takes the lane; venturi_history_partition records each partition's.
--
-- The migration reads the existing history once (to check that it belongs to the mixed
-- lane; no row is rewritten), holding its lock meanwhile: finishes that end jobs wait.
--
-- Rolling deploy: older workers keep working; nothing is lost or run twice. Their finishes
-- and sweeps insert into their state's lane. An older worker that holds the retention duty
-- calls venturi_history_extend without a lane, which now extends lanes 1 and 2 as wide as
-- that worker's HistoryPartition, and venturi_history_drop, which drops what is due in
-- any lane. An older worker clamps a prune time below the newest partition of any lane
-- (not of the job's): one whose retention reaches beyond the newer workers' lane of that
-- state (a longer RetainCompleted than theirs) fails to write the finish, which is retried
-- and, once a newer worker's rescue takes the job, written by it. make chaos/rolling runs
-- older workers through this migration under load.

ALTER TABLE venturi_job_history RENAME TO venturi_job_history_mixed;
ALTER INDEX venturi_job_history_id_idx RENAME TO venturi_job_history_mixed_id_idx;
ALTER INDEX venturi_job_history_finished_idx RENAME TO venturi_job_history_mixed_finished_idx;

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
    -- 0 in the mixed lane; NULL elsewhere (the lane follows from the state).
    lane              smallint,
    CONSTRAINT venturi_job_history_state_check CHECK (state IN ('completed', 'dead', 'cancelled'))
) PARTITION BY LIST ((COALESCE(lane, CASE WHEN state = 'dead' THEN 2 ELSE 1 END)));

-- A job by ID (every partition is probed: the ID is not the partition key), and the
-- finished jobs of a state newest first (the listing, the stats' window of recent ends).
CREATE INDEX venturi_job_history_id_idx ON venturi_job_history (id);
CREATE INDEX venturi_job_history_finished_idx ON venturi_job_history (state, finished_at, id);

CREATE TABLE venturi_job_history_completed PARTITION OF venturi_job_history (
    CONSTRAINT venturi_job_history_completed_state_check CHECK (state IN ('completed', 'cancelled'))
) FOR VALUES IN (1) PARTITION BY RANGE (prune_at);

CREATE TABLE venturi_job_history_dead PARTITION OF venturi_job_history (
    CONSTRAINT venturi_job_history_dead_state_check CHECK (state = 'dead')
) FOR VALUES IN (2) PARTITION BY RANGE (prune_at);

-- The partitions and their lanes. Rows that exist are the mixed lane's.
ALTER TABLE venturi_history_partition ADD COLUMN lane smallint NOT NULL DEFAULT 0;
ALTER TABLE venturi_history_partition ADD CONSTRAINT venturi_history_partition_lane CHECK (lane IN (0, 1, 2));
-- A lane's newest partition (every finish that ends a job reads its lane's).
CREATE INDEX venturi_history_partition_lane_idx ON venturi_history_partition (lane, hi);

-- The same relation as before: the view had followed the renamed table.
CREATE OR REPLACE VIEW venturi_job_all AS
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

-- The history as it was becomes the mixed lane (its rows' lane 0: attaching it reads them
-- once to check); a database that never had a partition (no worker started on it) has no
-- row in it, and drops it.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM venturi_history_partition) THEN
        ALTER TABLE venturi_job_history_mixed ADD COLUMN lane smallint DEFAULT 0;
        ALTER TABLE venturi_job_history ATTACH PARTITION venturi_job_history_mixed FOR VALUES IN (0);
    ELSE
        DROP TABLE venturi_job_history_mixed;
    END IF;
END
$$;

-- Creates lane p_lane's partitions (1: venturi_job_history_completed, 2:
-- venturi_job_history_dead), p_width wide and aligned on multiples of it from the epoch
-- for the lane's first, until one reaches p_until; returns how many it created. A lock
-- timeout (p_lock_timeout_ms) on the lane's table raises lock_not_available: the caller
-- tries again later.
CREATE FUNCTION venturi_history_extend(p_lane smallint, p_width interval, p_until timestamptz, p_lock_timeout_ms integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_hi    timestamptz;
    v_w     double precision := extract(epoch FROM p_width);
    v_table text := CASE p_lane WHEN 1 THEN 'venturi_job_history_completed' WHEN 2 THEN 'venturi_job_history_dead' END;
    v_name  text;
    n       int := 0;
BEGIN
    IF v_table IS NULL THEN
        RAISE EXCEPTION 'venturi: history lane % does not exist (1: completed and cancelled, 2: dead)', p_lane;
    END IF;
    IF v_w < 1 THEN
        RAISE EXCEPTION 'venturi: history partition width % is under a second', p_width;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_history', 0));
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true);
    SELECT max(hi) INTO v_hi FROM venturi_history_partition WHERE lane = p_lane;
    IF v_hi IS NULL THEN
        v_hi := to_timestamp(floor(extract(epoch FROM now()) / v_w) * v_w);
    END IF;
    WHILE v_hi < p_until LOOP
        v_name := v_table || '_' || to_char(v_hi AT TIME ZONE 'UTC', 'YYYYMMDD"t"HH24MISS');
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS, '
                       'CHECK (prune_at >= %L AND prune_at < %L)) WITH (autovacuum_freeze_min_age = 0)',
                       v_name, v_table, v_hi, v_hi + p_width);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       v_table, v_name, v_hi, v_hi + p_width);
        INSERT INTO venturi_history_partition (name, lo, hi, lane) VALUES (v_name, v_hi, v_hi + p_width, p_lane);
        v_hi := v_hi + p_width;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- The form older workers call: both lanes, as wide as the caller's one width.
CREATE OR REPLACE FUNCTION venturi_history_extend(p_width interval, p_until timestamptz, p_lock_timeout_ms integer)
RETURNS integer LANGUAGE sql AS $$
    SELECT venturi_history_extend(1::smallint, p_width, p_until, p_lock_timeout_ms)
         + venturi_history_extend(2::smallint, p_width, p_until, p_lock_timeout_ms);
$$;

-- Drops the oldest partition, of any lane, whose span is past p_now, after taking its jobs
-- out of the stats (those the stats counted: finished up to counted_through); once the
-- mixed lane has no partition left, drops it. Returns what it dropped, NULL when nothing
-- was due. A lock timeout (p_lock_timeout_ms) raises lock_not_available.
CREATE OR REPLACE FUNCTION venturi_history_drop(p_now timestamptz, p_lock_timeout_ms integer)
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
    IF v_name IS NULL AND to_regclass('venturi_job_history_mixed') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM venturi_history_partition p WHERE p.lane = 0) THEN
        v_name := 'venturi_job_history_mixed';
    END IF;
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
