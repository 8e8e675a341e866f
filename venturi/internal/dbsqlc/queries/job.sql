-- name: GetJob :one
-- A pending job (venturi_job: NOT in_history reads that table alone), and, when its kind
-- has a breaker that has seen a claim, the breaker it reports to (CircuitOf's join, in the
-- same statement). Queue.Job reads GetFinishedJob when the job is not here: a lookup by ID
-- in the history probes every partition, which a pending job should not pay.
SELECT j.id, j.kind, j.state, j.priority, j.dedup_key, j.payload, j.carry, j.run_at, j.runs, j.failures, j.journal,
       j.journal_moved, j.journal_dropped, j.created_at, j.attempted_at, j.finished_at, j.lease_expires_at,
       j.queue, j.part, j.slot_key, j.slot_limit, j.slot_policy, j.stop_requested_at, j.stop_event, j.stop_note,
       j.worker_id, j.meta,
       (b.threshold IS NOT NULL)::bool AS has_breaker,
       COALESCE(b.fails, 0)::int AS brk_fails, b.open_until AS brk_open_until, b.probe_until AS brk_probe_until,
       COALESCE(b.updated_at, j.created_at)::timestamptz AS brk_updated_at, COALESCE(b.threshold, 0)::int AS brk_threshold
FROM venturi_job_all j
LEFT JOIN LATERAL (
    SELECT g.fails, g.open_until, g.probe_until, g.updated_at, k.brk_failures::int AS threshold
    FROM venturi_kind k
    JOIN venturi_gate g ON g.key = 'b' || chr(31) || k.kind || CASE WHEN k.brk_by_part THEN chr(31) || COALESCE(j.part, '') ELSE '' END
    WHERE k.kind = j.kind AND k.brk_failures > 0
) b ON true
WHERE j.id = @id AND NOT j.in_history;

-- name: GetFinishedJob :one
-- GetJob for a job in the history of finished jobs.
SELECT j.id, j.kind, j.state, j.priority, j.dedup_key, j.payload, j.carry, j.run_at, j.runs, j.failures, j.journal,
       j.journal_moved, j.journal_dropped, j.created_at, j.attempted_at, j.finished_at, j.lease_expires_at,
       j.queue, j.part, j.slot_key, j.slot_limit, j.slot_policy, j.stop_requested_at, j.stop_event, j.stop_note,
       j.worker_id, j.meta,
       (b.threshold IS NOT NULL)::bool AS has_breaker,
       COALESCE(b.fails, 0)::int AS brk_fails, b.open_until AS brk_open_until, b.probe_until AS brk_probe_until,
       COALESCE(b.updated_at, j.created_at)::timestamptz AS brk_updated_at, COALESCE(b.threshold, 0)::int AS brk_threshold
FROM venturi_job_all j
LEFT JOIN LATERAL (
    SELECT g.fails, g.open_until, g.probe_until, g.updated_at, k.brk_failures::int AS threshold
    FROM venturi_kind k
    JOIN venturi_gate g ON g.key = 'b' || chr(31) || k.kind || CASE WHEN k.brk_by_part THEN chr(31) || COALESCE(j.part, '') ELSE '' END
    WHERE k.kind = j.kind AND k.brk_failures > 0
) b ON true
WHERE j.id = @id AND j.in_history;

-- name: CountJobs :many
-- Every job, pending or finished, by kind and state (a full count: for tests and tools).
SELECT kind, state, count(*)::bigint AS jobs
FROM venturi_job_all
GROUP BY kind, state
ORDER BY kind, state;

-- name: JobsOfKind :many
-- The jobs of one kind in the given states (every state when states is empty), oldest
-- first, for venturitest's assertions; the columns are GetJob's.
SELECT j.id, j.kind, j.state, j.priority, j.dedup_key, j.payload, j.carry, j.run_at, j.runs, j.failures, j.journal,
       j.journal_moved, j.journal_dropped, j.created_at, j.attempted_at, j.finished_at, j.lease_expires_at,
       j.queue, j.part, j.slot_key, j.slot_limit, j.slot_policy, j.stop_requested_at, j.stop_event, j.stop_note,
       j.worker_id, j.meta,
       (b.threshold IS NOT NULL)::bool AS has_breaker,
       COALESCE(b.fails, 0)::int AS brk_fails, b.open_until AS brk_open_until, b.probe_until AS brk_probe_until,
       COALESCE(b.updated_at, j.created_at)::timestamptz AS brk_updated_at, COALESCE(b.threshold, 0)::int AS brk_threshold
FROM venturi_job_all j
LEFT JOIN LATERAL (
    SELECT g.fails, g.open_until, g.probe_until, g.updated_at, k.brk_failures::int AS threshold
    FROM venturi_kind k
    JOIN venturi_gate g ON g.key = 'b' || chr(31) || k.kind || CASE WHEN k.brk_by_part THEN chr(31) || COALESCE(j.part, '') ELSE '' END
    WHERE k.kind = j.kind AND k.brk_failures > 0
) b ON true
WHERE j.kind = @kind
  AND (cardinality(@states::text[]) = 0 OR j.state::text = ANY(@states::text[]))
ORDER BY j.id
LIMIT @max::int;

-- name: JournalPage :many
-- Up to max entries of one job's journal numbered below before (its whole journal when
-- before is NULL), newest first: the entries still in the job's row (pending or finished)
-- and those moved to venturi_journal, read in one snapshot.
SELECT e.seq::bigint AS seq, e.entry::jsonb AS entry
FROM (
    SELECT j.journal_moved + r.ord AS seq, r.entry
    FROM venturi_job_all j, jsonb_array_elements(j.journal) WITH ORDINALITY AS r(entry, ord)
    WHERE j.id = @id
    UNION ALL
    SELECT m.seq, m.entry
    FROM venturi_journal m
    WHERE m.job_id = @id AND m.seq < COALESCE(sqlc.narg(before)::bigint, 9223372036854775807)
) e
WHERE e.seq < COALESCE(sqlc.narg(before)::bigint, 9223372036854775807)
ORDER BY e.seq DESC
LIMIT @max::int;

-- name: JobMeta :one
SELECT meta FROM venturi_job WHERE id = @id;

-- name: JobSignals :many
SELECT seq, name, payload, delivery_id, sent_at, consumed_at
FROM venturi_signal
WHERE job_id = @id
ORDER BY seq
LIMIT @max::int;

-- name: JobHooks :many
-- A job's hooks, never their token hashes.
SELECT name, reusable, created_at, expires_at, used_at, disposed_at
FROM venturi_hook
WHERE job_id = @id
ORDER BY created_at, name
LIMIT @max::int;

-- name: ExplainFacts :one
-- What holds a job of the kind in the queue (with the slot and partition) back now: the
-- queue's settings and running jobs, the slot's running jobs, the kind's limits, running
-- jobs and rate window, the job's backstop (max_failures of its last claim) and pending
-- signals, and the database time.
SELECT now()::timestamptz AS now,
       COALESCE(vq.paused, false)::bool AS queue_paused, COALESCE(vq.concurrency, 0)::int AS queue_concurrency,
       (CASE WHEN COALESCE(vq.concurrency, 0) > 0
             THEN (SELECT count(*) FROM venturi_job r WHERE r.state = 'running' AND r.queue = @queue::text) ELSE 0 END)::bigint AS queue_running,
       (CASE WHEN @slot_key::text <> ''
             THEN (SELECT count(*) FROM venturi_job r WHERE r.state = 'running' AND r.slot_key = @slot_key::text) ELSE 0 END)::bigint AS slot_running,
       COALESCE(k.concurrency, 0)::int AS kind_concurrency,
       (CASE WHEN COALESCE(k.concurrency, 0) > 0
             THEN (SELECT count(*) FROM venturi_job r WHERE r.state = 'running' AND r.part IS NOT NULL AND r.kind = @kind::text) ELSE 0 END)::bigint AS kind_running,
       COALESCE(k.rate_n, 0)::int AS rate_n,
       COALESCE((EXTRACT(EPOCH FROM k.rate_period) * 1000000)::bigint, 0)::bigint AS rate_period_us,
       COALESCE(k.rate_by_part, false)::bool AS rate_by_part,
       COALESCE((SELECT sum(w.c) FROM (SELECT unnest(rg.rate_at) AS at, unnest(rg.rate_n) AS c FROM venturi_gate rg
                                        WHERE rg.key = 'r' || chr(31) || @kind::text
                                              || CASE WHEN k.rate_by_part THEN chr(31) || @part::text ELSE '' END) w
                 WHERE w.at > now() - k.rate_period), 0)::bigint AS rate_used,
       -- When the oldest start of the window leaves it (-1: no start in it).
       COALESCE((EXTRACT(EPOCH FROM (
           SELECT min(w.at) + k.rate_period - now() FROM (SELECT unnest(rg.rate_at) AS at FROM venturi_gate rg
                                                          WHERE rg.key = 'r' || chr(31) || @kind::text
                                                                || CASE WHEN k.rate_by_part THEN chr(31) || @part::text ELSE '' END) w
           WHERE w.at > now() - k.rate_period)) * 1000000)::bigint, -1)::bigint AS rate_frees_in_us,
       COALESCE((SELECT j.max_failures FROM venturi_job_all j WHERE j.id = @id), 0)::int AS max_failures,
       COALESCE((SELECT j.wait_signals FROM venturi_job j WHERE j.id = @id), '{}')::text[] AS wait_signals,
       (SELECT count(*) FROM venturi_signal s WHERE s.job_id = @id AND s.consumed_token IS NULL)::bigint AS pending_signals
FROM (SELECT 1) AS one
LEFT JOIN venturi_queue vq ON vq.name = @queue::text
LEFT JOIN venturi_kind k ON k.kind = @kind::text;
