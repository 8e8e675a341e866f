-- name: TryStatsLock :one
-- The lock of the stats sample (internal/maintenance, stats.go): one worker at a time samples.
SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_stats', 0))::bool AS locked;

-- name: StatsBegin :one
-- The sampler's state, locked for the sample's transaction (the maintenance lock is held),
-- with the database time of the sample.
SELECT s.sampled_at, s.interval_us, s.counted_through, s.recounted_at, s.recount_every_us,
       now()::timestamptz AS now
FROM venturi_stats_state s
FOR UPDATE;

-- name: StatsPending :many
-- The unfinished jobs by queue, kind and state, each state read through its partial index
-- (available: the two claim indexes; scheduled, running, waiting: their own), with the sum
-- of their failures and the earliest due time (of an available line: the oldest job's).
SELECT p.queue::text AS queue, p.kind::text AS kind, p.state::text AS state, count(*)::bigint AS jobs,
       COALESCE(sum(p.failures), 0)::bigint AS failures, min(p.run_at)::timestamptz AS oldest
FROM (
    SELECT j.queue, j.kind, j.state, j.failures, j.run_at FROM venturi_job j WHERE j.state = 'available' AND j.part IS NULL
    UNION ALL
    SELECT j.queue, j.kind, j.state, j.failures, j.run_at FROM venturi_job j WHERE j.state = 'available' AND j.part IS NOT NULL
    UNION ALL
    SELECT j.queue, j.kind, j.state, j.failures, j.run_at FROM venturi_job j WHERE j.state = 'scheduled'
    UNION ALL
    SELECT j.queue, j.kind, j.state, j.failures, j.run_at FROM venturi_job j WHERE j.state = 'running'
    UNION ALL
    SELECT j.queue, j.kind, j.state, j.failures, j.run_at FROM venturi_job j WHERE j.state = 'waiting'
) p
GROUP BY p.queue, p.kind, p.state;

-- name: StatsFinished :many
-- The jobs that finished since the sample's counted_through, by queue, kind, state and
-- whether they finished inside the sample's commit margin (recent: after through, not
-- counted yet), through the finished indexes, with the sum of their failures; with
-- recount, every finished job up to through. through is the sample's time less margin_us,
-- never before counted_through (all database times: this transaction's now()).
WITH b AS (
    SELECT GREATEST(COALESCE(s.counted_through, '-infinity'), now() - interval '1 microsecond' * @margin_us::bigint) AS through,
           s.counted_through AS ct
    FROM venturi_stats_state s
), w AS (
    SELECT b.through,
           CASE WHEN @recount::bool THEN '-infinity' ELSE COALESCE(b.ct, b.through) END AS after,
           CASE WHEN @recount::bool THEN b.through ELSE now() END AS upto
    FROM b
)
SELECT f.queue::text AS queue, f.kind::text AS kind, f.state::text AS state,
       (f.finished_at > (SELECT w.through FROM w))::bool AS recent, count(*)::bigint AS jobs,
       COALESCE(sum(f.failures), 0)::bigint AS failures
FROM (
    SELECT j.queue, j.kind, j.state, j.failures, j.finished_at FROM venturi_job j
    WHERE j.state IN ('completed', 'dead')
      AND j.finished_at > (SELECT w.after FROM w) AND j.finished_at <= (SELECT w.upto FROM w)
    UNION ALL
    SELECT j.queue, j.kind, j.state, j.failures, j.finished_at FROM venturi_job j
    WHERE j.state = 'cancelled'
      AND j.finished_at > (SELECT w.after FROM w) AND j.finished_at <= (SELECT w.upto FROM w)
    UNION ALL
    -- The history of finished jobs (venturi_job_history_finished_idx: a range per state).
    SELECT h.queue, h.kind, h.state, h.failures, h.finished_at FROM venturi_job_history h
    WHERE h.state IN ('completed', 'dead', 'cancelled')
      AND h.finished_at > (SELECT w.after FROM w) AND h.finished_at <= (SELECT w.upto FROM w)
) f
GROUP BY f.queue, f.kind, f.state, (f.finished_at > (SELECT w.through FROM w));

-- name: StatsKinds :many
-- The latest sample's rows, locked: removals (venturi_stats_forget) wait for the new sample.
SELECT queue, kind, available, running, scheduled, waiting, completed, dead, cancelled, pending_failures
FROM venturi_stats_kind
ORDER BY queue, kind
FOR UPDATE;

-- name: StatsWriteKinds :exec
-- Replaces the latest sample's rows with the given ones.
WITH r AS (
    SELECT unnest(@queues::text[]) AS queue, unnest(@kinds::text[]) AS kind,
           unnest(@available::bigint[]) AS available, unnest(@running::bigint[]) AS running,
           unnest(@scheduled::bigint[]) AS scheduled, unnest(@waiting::bigint[]) AS waiting,
           unnest(@completed::bigint[]) AS completed, unnest(@dead::bigint[]) AS dead,
           unnest(@cancelled::bigint[]) AS cancelled, unnest(@pending_failures::bigint[]) AS pending_failures,
           unnest(@oldest_us::bigint[]) AS oldest_us,
           unnest(@completed_per_sec::float8[]) AS completed_per_sec, unnest(@failed_per_sec::float8[]) AS failed_per_sec,
           unnest(@dead_per_sec::float8[]) AS dead_per_sec
), gone AS (
    DELETE FROM venturi_stats_kind s
    WHERE NOT EXISTS (SELECT 1 FROM r WHERE r.queue = s.queue AND r.kind = s.kind)
)
INSERT INTO venturi_stats_kind AS s (queue, kind, available, running, scheduled, waiting, completed, dead, cancelled,
                                     pending_failures, oldest_available, completed_per_sec, failed_per_sec, dead_per_sec)
SELECT r.queue, r.kind, r.available, r.running, r.scheduled, r.waiting, r.completed, r.dead, r.cancelled,
       r.pending_failures, CASE WHEN r.oldest_us > 0 THEN timestamptz 'epoch' + r.oldest_us * interval '1 microsecond' END,
       r.completed_per_sec, r.failed_per_sec, r.dead_per_sec
FROM r
ON CONFLICT (queue, kind) DO UPDATE SET
    available = EXCLUDED.available, running = EXCLUDED.running, scheduled = EXCLUDED.scheduled,
    waiting = EXCLUDED.waiting, completed = EXCLUDED.completed, dead = EXCLUDED.dead,
    cancelled = EXCLUDED.cancelled, pending_failures = EXCLUDED.pending_failures,
    oldest_available = EXCLUDED.oldest_available, completed_per_sec = EXCLUDED.completed_per_sec,
    failed_per_sec = EXCLUDED.failed_per_sec, dead_per_sec = EXCLUDED.dead_per_sec;

-- name: StatsWriteHistory :exec
INSERT INTO venturi_stats_history (at, queue, available, running, scheduled, waiting, oldest_available, lag_us,
                                   completed_per_sec, failed_per_sec, dead_per_sec)
SELECT now(), u.queue, u.available, u.running, u.scheduled, u.waiting,
       CASE WHEN u.oldest_us > 0 THEN timestamptz 'epoch' + u.oldest_us * interval '1 microsecond' END, u.lag_us,
       u.completed_per_sec, u.failed_per_sec, u.dead_per_sec
FROM (SELECT unnest(@queues::text[]) AS queue, unnest(@available::bigint[]) AS available,
             unnest(@running::bigint[]) AS running, unnest(@scheduled::bigint[]) AS scheduled,
             unnest(@waiting::bigint[]) AS waiting, unnest(@oldest_us::bigint[]) AS oldest_us,
             unnest(@lag_us::bigint[]) AS lag_us, unnest(@completed_per_sec::float8[]) AS completed_per_sec,
             unnest(@failed_per_sec::float8[]) AS failed_per_sec, unnest(@dead_per_sec::float8[]) AS dead_per_sec) u;

-- name: StatsEnd :exec
-- Records a sample taken at now() (and a recount when recount_us >= 0), with the finished
-- jobs counted up to now() less margin_us (never moving back).
UPDATE venturi_stats_state SET
    sampled_at = now(), interval_us = @interval_us::bigint, sample_us = @sample_us::bigint,
    counted_through = GREATEST(COALESCE(counted_through, '-infinity'), now() - interval '1 microsecond' * @margin_us::bigint),
    sampler = @sampler::text,
    recounted_at = CASE WHEN @recount_us::bigint >= 0 THEN now() ELSE recounted_at END,
    recount_us = CASE WHEN @recount_us::bigint >= 0 THEN @recount_us::bigint ELSE recount_us END,
    recount_every_us = CASE WHEN @recount_us::bigint >= 0 THEN @recount_every_us::bigint ELSE recount_every_us END;

-- name: StatsPruneHistory :execrows
-- Deletes samples older than 24 hours, a batch at a time (the primary key starts with at).
DELETE FROM venturi_stats_history
WHERE (at, queue) IN (SELECT h.at, h.queue FROM venturi_stats_history h
                      WHERE h.at < now() - interval '24 hours'
                      ORDER BY h.at
                      LIMIT @max::int);

-- name: StatsRead :many
-- The latest sample: one row per queue and kind (kind NULL for a queue without kinds in
-- it: one that only has settings), with the queue's settings and its line of the history.
WITH st AS (
    SELECT s.sampled_at FROM venturi_stats_state s
), names AS (
    SELECT k.queue FROM venturi_stats_kind k
    UNION
    SELECT q.name FROM venturi_queue q
)
SELECT n.queue::text AS queue, st.sampled_at, COALESCE(vq.paused, false)::bool AS paused,
       COALESCE(vq.concurrency, 0)::int AS concurrency,
       h.oldest_available, COALESCE(h.lag_us, 0)::bigint AS lag_us,
       k.kind, COALESCE(k.available, 0)::bigint AS available, COALESCE(k.running, 0)::bigint AS running,
       COALESCE(k.scheduled, 0)::bigint AS scheduled, COALESCE(k.waiting, 0)::bigint AS waiting,
       COALESCE(k.completed, 0)::bigint AS completed, COALESCE(k.dead, 0)::bigint AS dead,
       COALESCE(k.cancelled, 0)::bigint AS cancelled,
       COALESCE(k.completed_per_sec, 0)::float8 AS completed_per_sec,
       COALESCE(k.failed_per_sec, 0)::float8 AS failed_per_sec,
       COALESCE(k.dead_per_sec, 0)::float8 AS dead_per_sec
FROM names n
CROSS JOIN st
LEFT JOIN venturi_queue vq ON vq.name = n.queue
LEFT JOIN venturi_stats_history h ON h.at = st.sampled_at AND h.queue = n.queue
LEFT JOIN venturi_stats_kind k ON k.queue = n.queue
ORDER BY n.queue, k.kind;

-- name: StatsDeferredMerges :many
-- The enqueues from SQL that wait for a Go merge (venturi_deferred_merge), by kind, read
-- live: how many, of how many keys, and the oldest one's enqueue time and age by the
-- database clock (the reading transaction's start; never negative).
SELECT d.kind, count(*)::bigint AS waiting, count(DISTINCT d.dedup_key)::bigint AS keys,
       min(d.created_at)::timestamptz AS oldest,
       GREATEST(0, (EXTRACT(EPOCH FROM now() - min(d.created_at)) * 1000000))::bigint AS oldest_age_us
FROM venturi_deferred_merge d
GROUP BY d.kind
ORDER BY d.kind;

-- name: StatsSampledAt :one
SELECT sampled_at FROM venturi_stats_state;

-- name: StatsHistory :many
-- The newest max samples since the given time, at most the last 24 hours, newest first.
SELECT at, queue, available, running, scheduled, waiting, lag_us, completed_per_sec, failed_per_sec, dead_per_sec
FROM venturi_stats_history
WHERE at >= GREATEST(@since::timestamptz, now() - interval '24 hours')
ORDER BY at DESC, queue DESC
LIMIT @max::int;
