-- name: Claim :many
-- Claims up to max due plain jobs (see ClaimGated for the others) of the given kinds from one queue, most urgent first, then by
-- due time, then by ID, and opens a run on each under a fresh fencing token. One walk of
-- venturi_job_claim_queue_idx in that order: jobs of other kinds are stepped over and only
-- the rows taken are locked, so the cost follows the rows returned, not the kinds served.
-- The rows locked are updated by tuple ID (a TID scan of the versions just locked, which
-- cannot move before the update: this statement holds their locks) instead of being found
-- again through the primary key: 8% less server CPU per job end to end (bench/FINDINGS.md
-- section 15). The locking select sits in the UPDATE's WHERE, an array computed once,
-- because sqlc cannot type the system column ctid in a CTE's output. A row that another
-- transaction changed and committed after this statement's snapshot is locked in its new
-- version, which the snapshot does not see: it is left available (unlocked at the claim's
-- commit) for the next claim, as a row another transaction holds is skipped. The rows come
-- back in no particular order: the worker sorts them (priority, due time, ID). events says
-- which record events: their started events are written before the claim commits
-- (WriteStartedEvents).
UPDATE venturi_job j SET
    state            = 'running',
    runs             = j.runs + 1,
    lease_token      = nextval('venturi_lease_token_seq'),
    lease_expires_at = now() + interval '1 microsecond' * @lease_us::bigint,
    worker_id        = @worker_id::text,
    attempted_at     = now(),
    max_failures     = @max_failures::int
WHERE ctid = ANY(ARRAY(
    SELECT ctid
    FROM venturi_job p
    WHERE p.state = 'available' AND p.part IS NULL AND p.queue = @queue::text AND p.kind = ANY(@kinds::text[])
      -- A paused queue starts nothing; a queue with a concurrency limit is claimed by
      -- ClaimGated, which enforces it.
      AND NOT EXISTS (SELECT 1 FROM venturi_queue vq WHERE vq.name = @queue::text AND (vq.paused OR vq.concurrency > 0))
    ORDER BY p.priority DESC, p.run_at, p.id
    LIMIT @max::int
    FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.kind, j.payload, j.carry, j.runs, j.failures, j.lease_token, j.journal,
          j.journal_moved, j.attempted_at, j.meta, j.run_at, j.priority, j.events;

-- name: WriteStartedEvents :exec
-- The started events of the jobs Claim claimed in this transaction that record events, in
-- one insert, and one NOTIFY (as FinishRuns writes the final events). The fetcher sends it
-- with the claim's COMMIT, only when the claim returned such jobs: a claim of jobs that
-- record none pays nothing for it. Claim's rows are the running ones whose lease ends at
-- this transaction's now() plus the lease, found in venturi_job_lease_idx as one range
-- (the gated claim's leases count from clock_timestamp(), and it writes its own events),
-- that this worker's transaction wrote. The claim's transaction sets
-- venturi.claim_started_events (SetLocalIdleTimeout), so venturi_event_write leaves these
-- events to this statement instead of writing one per row; a claim by an older worker,
-- which does not, still gets them from the trigger.
WITH started AS (
    INSERT INTO venturi_event (job_id, kind, queue, event, run, state, worker, started_at, run_at, meta)
    SELECT j.id, j.kind, j.queue, 'started', j.runs, 'running', j.worker_id, j.attempted_at, j.run_at, j.meta
    FROM venturi_job j
    WHERE j.state = 'running' AND j.lease_expires_at = now() + interval '1 microsecond' * @lease_us::bigint
      AND j.worker_id = @worker_id::text AND j.events AND j.xmin = pg_current_xact_id()::xid
    RETURNING 1
)
SELECT count(pg_notify(venturi_events_channel(), '')) FROM (SELECT 1 FROM started LIMIT 1) s;

-- name: NextDue :one
-- How long until the next scheduled job of the given kinds in the queue is due (database clock), in
-- microseconds; 0 when one is already due, -1 when none is scheduled or when due is false
-- (the worker's claims are full: it will not go idle, and needs no time to wake at). An
-- idle worker sleeps until then instead of waiting for its poll. Also whether the queue
-- is paused (a worker that learns it releases the jobs it holds), whatever due is.
-- Each kind is one probe of venturi_job_scheduled_kind_idx and one of
-- venturi_job_waiting_kind_idx (a wait's timeout): a scan in run_at order over every
-- kind would walk the scheduled jobs of the others first, all of them when the worker's
-- kinds have none.
-- (GREATEST ignores NULLs: GREATEST(min(run_at) - now(), '0') was 0, "due now", when
-- nothing is scheduled, and an idle worker claimed again at once, in a loop.)
SELECT (CASE WHEN min(m.run_at) IS NULL THEN -1
             ELSE GREATEST(EXTRACT(EPOCH FROM min(m.run_at) - now()) * 1000000, 0) END)::bigint AS due_in_us,
       COALESCE((SELECT vq.paused FROM venturi_queue vq WHERE vq.name = @queue::text), false)::bool AS paused
FROM unnest(CASE WHEN @due::boolean THEN @kinds::text[] ELSE '{}'::text[] END) AS k(kind)
CROSS JOIN LATERAL (
    (SELECT j.run_at FROM venturi_job j
     WHERE j.state = 'scheduled' AND j.queue = @queue::text AND j.kind = k.kind
     ORDER BY j.run_at
     LIMIT 1)
    UNION ALL
    (SELECT j.run_at FROM venturi_job j
     WHERE j.state = 'waiting' AND j.queue = @queue::text AND j.kind = k.kind
     ORDER BY j.run_at
     LIMIT 1)
) m;

-- name: ClaimGated :many
-- Claims up to max gated jobs (slots, partitions, kinds with limits; every job of a queue
-- with a concurrency limit) from one queue: see schema/functions/venturi_claim_gated.sql. A
-- row with a NULL id is not a job: its wake_in_us says when a job held back by a rate or a
-- breaker may run.
SELECT id::uuid AS id, kind::text AS kind, payload::jsonb AS payload, carry::jsonb AS carry,
       runs::int AS runs, failures::int AS failures, lease_token::bigint AS lease_token,
       journal::jsonb AS journal, journal_moved::bigint AS journal_moved,
       attempted_at::timestamptz AS attempted_at, COALESCE(breaker, '')::text AS breaker,
       COALESCE(wake_in_us, -1)::bigint AS wake_in_us,
       -- The job's metadata, from the row the claim updated: JSON null when it has none
       -- (SQL NULL only in a row that is not a job).
       g.meta::jsonb AS meta,
       -- The job's due time, for work middleware (JobInfo.Due); NULL only in a row that
       -- is not a job.
       COALESCE(g.run_at, g.attempted_at)::timestamptz AS run_at
FROM venturi_claim_gated(@queue::text, @kinds::text[], @max::int, @lease_us::bigint, @worker_id::text,
                         @max_failures::int, @channel::text) g
-- Called only when the queue has a gated job available or a concurrency limit: a one-time
-- filter, so the plain path pays one index probe per claim instead of a PL/pgSQL call. The
-- probe reads the first entry of the gated claim index in its order (a scalar subquery:
-- as an EXISTS, its ORDER BY would be dropped and the planner could scan the table).
WHERE (SELECT x.part FROM venturi_job x
       WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = @queue::text
       ORDER BY x.part LIMIT 1) IS NOT NULL
   OR (SELECT vq.concurrency FROM venturi_queue vq WHERE vq.name = @queue::text) > 0;
