-- name: HistoryExtend :one
-- Creates the partitions of venturi_job_history's lane (1: completed and cancelled, 2:
-- dead), width_us wide, ahead until one ends ahead_us from now
-- (schema/functions/venturi_history_extend.sql); returns how many it created.
SELECT venturi_history_extend(@lane::smallint, interval '1 microsecond' * @width_us::bigint,
                              now() + interval '1 microsecond' * @ahead_us::bigint,
                              @lock_timeout_ms::int)::int AS created;

-- name: HistoryDrop :one
-- Drops the oldest partition whose jobs are all past their prune time, and takes them out
-- of the stats (schema/functions/venturi_history_drop.sql); returns its name ('' when none
-- was due).
SELECT COALESCE(venturi_history_drop(now(), @lock_timeout_ms::int), '')::text AS dropped;

-- name: HistoryHorizon :one
-- Where the lane's newest partition ends, and how far that is from now (microseconds;
-- negative when it is past; now and -1 when the lane has no partition).
SELECT COALESCE(max(p.hi), now())::timestamptz AS horizon,
       COALESCE((EXTRACT(EPOCH FROM max(p.hi) - now()) * 1000000)::bigint, -1)::bigint AS ahead_us
FROM venturi_history_partition p
WHERE p.lane = @lane::smallint;

-- name: SweepEnded :one
-- Moves a batch (max of each of two sets of states) of jobs that ended in venturi_job (a
-- rescue past the backstop, a cancel, a run asked to stop, an older worker's finish) into
-- venturi_job_history, each in its state's lane with its prune time: when it finished plus
-- the retention of its state (retain_completed_us for completed and cancelled jobs,
-- retain_dead_us for dead ones), clamped below the end of the lane's newest partition. A
-- job kept for no time (a negative retention), or already past its prune time, is deleted
-- instead, and taken out of the stats if they counted it; one to be kept in a lane that has
-- no partition yet stays. Returns how many jobs left venturi_job and how many of them were
-- kept.
WITH lanes AS (
    -- Where each lane's newest partition ends (NULL: the lane has none).
    -- (Two index probes, venturi_history_partition_lane_idx: under SetLocalIndexScans a
    -- scan of the table would cost the plan enough for JIT compilation, ~0.5 s a plan.)
    SELECT (SELECT max(p.hi) FROM venturi_history_partition p WHERE p.lane = 1) AS completed_hi,
           (SELECT max(p.hi) FROM venturi_history_partition p WHERE p.lane = 2) AS dead_hi
), doomed AS (
    -- Through the partial indexes of the ended states (venturi_job_finished_idx: completed
    -- and dead; venturi_job_cancelled_idx): one IN list of the three states matches
    -- neither index's predicate, and was a scan of the whole table.
    SELECT f.id FROM (
        SELECT j.id FROM venturi_job j, lanes l WHERE j.state IN ('completed', 'dead')
          AND CASE WHEN j.state = 'dead' THEN @retain_dead_us::bigint < 0 OR l.dead_hi IS NOT NULL
                   ELSE @retain_completed_us::bigint < 0 OR l.completed_hi IS NOT NULL END
        LIMIT @max::int FOR UPDATE OF j SKIP LOCKED) f
    UNION ALL
    SELECT c.id FROM (
        SELECT j.id FROM venturi_job j, lanes l WHERE j.state = 'cancelled'
          AND (@retain_completed_us::bigint < 0 OR l.completed_hi IS NOT NULL)
        LIMIT @max::int FOR UPDATE OF j SKIP LOCKED) c
), gone AS (
    DELETE FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT doomed.id FROM doomed))
    RETURNING j.id, j.kind, j.state, j.priority, j.dedup_key, j.payload, j.carry, j.run_at, j.runs, j.failures,
              j.max_failures, j.worker_id, j.attempted_at, j.journal, j.created_at,
              COALESCE(j.finished_at, now()) AS finished_at, j.journal_moved, j.journal_dropped, j.queue,
              j.part, j.slot_key, j.slot_limit, j.slot_policy, j.breaker, j.stop_requested_at, j.stop_event,
              j.stop_note, j.events, j.meta, j.workflow_id,
              (CASE WHEN j.state = 'dead' THEN @retain_dead_us::bigint ELSE @retain_completed_us::bigint END) AS retain_us,
              (CASE WHEN j.state = 'dead' THEN 2 ELSE 1 END)::smallint AS lane
), ended AS (
    -- Kept: a retention that keeps something, and a prune time not past yet.
    SELECT g.*, (g.retain_us >= 0 AND g.finished_at + interval '1 microsecond' * g.retain_us >= now()) AS keep,
           CASE WHEN g.lane = 2 THEN l.dead_hi ELSE l.completed_hi END AS lane_hi
    FROM gone g CROSS JOIN lanes l
), kept AS (
    INSERT INTO venturi_job_history (id, kind, state, priority, dedup_key, payload, carry, run_at, runs, failures,
        max_failures, worker_id, attempted_at, journal, created_at, finished_at, journal_moved, journal_dropped,
        queue, part, slot_key, slot_limit, slot_policy, breaker, stop_requested_at, stop_event, stop_note,
        events, meta, prune_at, workflow_id)
    SELECT e.id, e.kind, e.state, e.priority, e.dedup_key, e.payload, e.carry, e.run_at, e.runs, e.failures,
           e.max_failures, e.worker_id, e.attempted_at, e.journal, e.created_at, e.finished_at, e.journal_moved,
           e.journal_dropped, e.queue, e.part, e.slot_key, e.slot_limit, e.slot_policy, e.breaker,
           e.stop_requested_at, e.stop_event, e.stop_note, e.events, e.meta,
           LEAST(e.finished_at + interval '1 microsecond' * e.retain_us, e.lane_hi - interval '1 microsecond'),
           e.workflow_id
    FROM ended e
    WHERE e.keep
    RETURNING id
), dropped AS (
    SELECT e.queue, e.kind, e.state, e.finished_at FROM ended e WHERE NOT e.keep
)
SELECT (SELECT count(*) FROM gone)::int AS ended,
       (SELECT count(*) FROM kept)::int AS kept,
       COALESCE((SELECT venturi_stats_forget(array_agg(d.queue), array_agg(d.kind), array_agg(d.state::text),
                                             array_agg(d.finished_at)) FROM dropped d), 0)::bigint AS forgotten;

-- name: SweepOrphanJournal :one
-- One batch of the orphan sweep over venturi_journal, in job order after after: deletes
-- the moved journal entries of jobs that are in neither venturi_job nor venturi_job_history
-- (deleted, or pruned with their partition). Returns the jobs scanned, the last one and the
-- rows deleted. The sweeps of signals, hooks and steps are the same.
WITH scanned AS (
    SELECT DISTINCT x.job_id FROM venturi_journal x WHERE x.job_id > @after::uuid ORDER BY x.job_id LIMIT @max::int
), orphan AS (
    SELECT s.job_id FROM scanned s WHERE NOT EXISTS (SELECT 1 FROM venturi_job_all a WHERE a.id = s.job_id)
), gone AS (
    DELETE FROM venturi_journal x WHERE x.job_id = ANY(ARRAY(SELECT orphan.job_id FROM orphan)) RETURNING 1
)
SELECT (SELECT count(*) FROM scanned)::int AS scanned,
       COALESCE((SELECT max(s.job_id::text) FROM scanned s), '')::text AS last_job,
       (SELECT count(*) FROM gone)::int AS deleted;

-- name: SweepOrphanSignals :one
WITH scanned AS (
    SELECT DISTINCT x.job_id FROM venturi_signal x WHERE x.job_id > @after::uuid ORDER BY x.job_id LIMIT @max::int
), orphan AS (
    SELECT s.job_id FROM scanned s WHERE NOT EXISTS (SELECT 1 FROM venturi_job_all a WHERE a.id = s.job_id)
), gone AS (
    DELETE FROM venturi_signal x WHERE x.job_id = ANY(ARRAY(SELECT orphan.job_id FROM orphan)) RETURNING 1
)
SELECT (SELECT count(*) FROM scanned)::int AS scanned,
       COALESCE((SELECT max(s.job_id::text) FROM scanned s), '')::text AS last_job,
       (SELECT count(*) FROM gone)::int AS deleted;

-- name: SweepOrphanHooks :one
WITH scanned AS (
    SELECT DISTINCT x.job_id FROM venturi_hook x WHERE x.job_id > @after::uuid ORDER BY x.job_id LIMIT @max::int
), orphan AS (
    SELECT s.job_id FROM scanned s WHERE NOT EXISTS (SELECT 1 FROM venturi_job_all a WHERE a.id = s.job_id)
), gone AS (
    DELETE FROM venturi_hook x WHERE x.job_id = ANY(ARRAY(SELECT orphan.job_id FROM orphan)) RETURNING 1
)
SELECT (SELECT count(*) FROM scanned)::int AS scanned,
       COALESCE((SELECT max(s.job_id::text) FROM scanned s), '')::text AS last_job,
       (SELECT count(*) FROM gone)::int AS deleted;

-- name: SweepOrphanSteps :one
WITH scanned AS (
    SELECT DISTINCT x.job_id FROM venturi_step x WHERE x.job_id > @after::uuid ORDER BY x.job_id LIMIT @max::int
), orphan AS (
    SELECT s.job_id FROM scanned s WHERE NOT EXISTS (SELECT 1 FROM venturi_job_all a WHERE a.id = s.job_id)
), gone AS (
    DELETE FROM venturi_step x WHERE x.job_id = ANY(ARRAY(SELECT orphan.job_id FROM orphan)) RETURNING 1
)
SELECT (SELECT count(*) FROM scanned)::int AS scanned,
       COALESCE((SELECT max(s.job_id::text) FROM scanned s), '')::text AS last_job,
       (SELECT count(*) FROM gone)::int AS deleted;
