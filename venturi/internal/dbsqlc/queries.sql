-- name: InsertJob :exec
-- A job with a partition or a slot, or of a kind with limits, is gated: part is its
-- partition (empty for none) and the gated claim takes it.
INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta)
SELECT @id, @kind, @queue::text, CASE WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
       @priority, sqlc.narg(dedup_key), (@payload::text)::jsonb, t.at,
       COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = @kind AND vk.limited)),
       sqlc.narg(slot_key)::text, sqlc.narg(slot_limit)::int, sqlc.narg(slot_policy)::smallint,
       sqlc.arg(events)::bool, sqlc.narg(meta)::jsonb
FROM (SELECT COALESCE(sqlc.narg(at)::timestamptz, now()) + interval '1 microsecond' * @delay_us::bigint AS at) t;

-- name: InsertJobs :exec
INSERT INTO venturi_job (id, kind, queue, state, priority, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta)
SELECT u.id, u.kind, u.queue, CASE WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
       u.priority, u.payload::jsonb, t.at,
       CASE WHEN u.has_part THEN u.part WHEN vk.limited THEN '' END,
       NULLIF(u.slot_key, ''), CASE WHEN u.slot_key <> '' THEN u.slot_limit END, CASE WHEN u.slot_key <> '' THEN u.slot_policy END,
       u.events, NULLIF(u.meta, '')::jsonb
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@kinds::text[]) AS kind, unnest(@queues::text[]) AS queue, unnest(@priorities::smallint[]) AS priority, unnest(@payloads::text[]) AS payload, unnest(@has_at::bool[]) AS has_at, unnest(@ats::timestamptz[]) AS at, unnest(@delays_us::bigint[]) AS delay_us, unnest(@has_part::bool[]) AS has_part, unnest(@parts::text[]) AS part, unnest(@slot_keys::text[]) AS slot_key, unnest(@slot_limits::int[]) AS slot_limit, unnest(@slot_policies::smallint[]) AS slot_policy, unnest(@events::bool[]) AS events, unnest(@metas::text[]) AS meta, generate_subscripts(@ids::uuid[], 1) AS ord) AS u
LEFT JOIN venturi_kind vk ON vk.kind = u.kind
CROSS JOIN LATERAL (
    SELECT CASE WHEN u.has_at THEN u.at ELSE now() END + u.delay_us * interval '1 microsecond' AS at
) t
-- In the order given: a partition's jobs get their virtual times in insertion order
-- (migration 16), and the join may reorder the rows.
ORDER BY u.ord;

-- name: Notify :exec
SELECT pg_notify(@channel::text, @payload::text);

-- name: DedupLock :one
-- Serializes enqueues of one (kind, dedup_key) until the enclosing transaction ends, and
-- reports the isolation level: the candidate lookup that follows must take a fresh
-- snapshot, which only READ COMMITTED gives.
SELECT current_setting('transaction_isolation')::text AS isolation
FROM pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || @kind::text || '/' || @dedup_key::text, 0));

-- name: InsertIfNoCandidate :one
-- The common dedup case in one statement: insert unless a pending job has the key.
WITH cand AS (
    SELECT j.id FROM venturi_job j
    WHERE j.kind = @kind AND j.dedup_key = @dedup_key::text AND j.state IN ('scheduled', 'available')
    LIMIT 1
), ins AS (
    INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta)
    SELECT @id, @kind, @queue::text, CASE WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
           @priority, @dedup_key::text, (@payload::text)::jsonb, t.at,
           COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = @kind AND vk.limited)),
           sqlc.narg(slot_key)::text, sqlc.narg(slot_limit)::int, sqlc.narg(slot_policy)::smallint,
           sqlc.arg(events)::bool, sqlc.narg(meta)::jsonb
    FROM (SELECT COALESCE(sqlc.narg(at)::timestamptz, now()) + interval '1 microsecond' * @delay_us::bigint AS at) t
    WHERE NOT EXISTS (SELECT 1 FROM cand)
      -- Only READ COMMITTED gives this statement a snapshot taken after the key's lock.
      AND current_setting('transaction_isolation') = 'read committed'
    RETURNING venturi_job.state
)
SELECT EXISTS (SELECT 1 FROM ins)::bool AS inserted,
       COALESCE((SELECT state = 'available' FROM ins), false)::bool AS due;

-- name: DedupCandidate :one
-- The newest pending job with the key, locked so no worker claims it while merge runs.
SELECT id, priority, payload, carry, runs, failures, journal, journal_moved
FROM venturi_job
WHERE kind = @kind AND dedup_key = @dedup_key::text AND state IN ('scheduled', 'available')
ORDER BY id DESC
LIMIT 1
FOR UPDATE;

-- name: MergeInto :one
-- Applies Keep (replace = false, set_carry = false), Replace or With to a pending job and
-- appends the merged journal entry with the due time before and after. due_policy moves the
-- due time: 0 earliest (the earlier of the job's and the incoming one: the merge never
-- delays it), 1 keep (throttle), 2 debounce (now + debounce_us, but no later than
-- max_wait_us after the burst began when max_wait_us > 0). A burst begins at the job's
-- creation, or at the first debounced merge after a run (burst_run = runs while current).
UPDATE venturi_job j SET
    payload  = CASE WHEN @replace::bool THEN (@payload::text)::jsonb ELSE j.payload END,
    priority = CASE WHEN @replace::bool THEN @priority::smallint ELSE j.priority END,
    carry    = CASE WHEN @set_carry::bool THEN NULLIF(@carry::text, '')::jsonb ELSE j.carry END,
    -- Replace and With take the new task's queue, partition and slot too (its identity
    -- beyond kind and key follows its payload).
    queue    = CASE WHEN @replace::bool THEN @queue::text ELSE j.queue END,
    part     = CASE WHEN @replace::bool
                    THEN COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited))
                    ELSE j.part END,
    slot_key    = CASE WHEN @replace::bool THEN sqlc.narg(slot_key)::text ELSE j.slot_key END,
    slot_limit  = CASE WHEN @replace::bool THEN sqlc.narg(slot_limit)::int ELSE j.slot_limit END,
    slot_policy = CASE WHEN @replace::bool THEN sqlc.narg(slot_policy)::smallint ELSE j.slot_policy END,
    run_at   = t.at,
    state    = CASE WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
    burst_at  = CASE WHEN @due_policy::smallint = 2 THEN t.burst ELSE j.burst_at END,
    burst_run = CASE WHEN @due_policy::smallint = 2 THEN j.runs ELSE j.burst_run END,
    -- A merge that opts in to the event stream opts the job in (never out).
    events    = j.events OR @events::bool,
    journal  = j.journal || jsonb_build_array((@entry::text)::jsonb
        || jsonb_build_object('at', now(), 'due_before', t.before, 'due_after', t.at))
FROM (
    SELECT b.before, b.burst,
           CASE @due_policy::smallint
               WHEN 1 THEN b.before
               WHEN 2 THEN CASE WHEN @max_wait_us::bigint > 0
                                THEN LEAST(now() + interval '1 microsecond' * @debounce_us::bigint,
                                           b.burst + interval '1 microsecond' * @max_wait_us::bigint)
                                ELSE now() + interval '1 microsecond' * @debounce_us::bigint END
               ELSE LEAST(b.before, COALESCE(sqlc.narg(at)::timestamptz, now()) + interval '1 microsecond' * @delay_us::bigint)
           END AS at
    FROM (
        SELECT o.run_at AS before,
               CASE WHEN o.burst_run = o.runs THEN o.burst_at
                    WHEN o.runs = 0 THEN o.created_at
                    ELSE now() END AS burst
        FROM venturi_job o WHERE o.id = @id
    ) b
) t
WHERE j.id = @id AND j.state IN ('scheduled', 'available')
RETURNING (j.state = 'available')::bool AS due, j.run_at;

-- name: PromoteDue :execrows
-- Moves scheduled jobs that came due, and waiting jobs whose wait timed out, to available.
-- Idempotent; any worker may run it.
WITH due AS (
    SELECT id FROM venturi_job
    WHERE state = 'scheduled' AND run_at <= now()
    ORDER BY run_at
    LIMIT @max::int
    FOR UPDATE SKIP LOCKED
), timed_out AS (
    SELECT id FROM venturi_job
    WHERE state = 'waiting' AND run_at <= now()
    ORDER BY run_at
    LIMIT @max::int
    FOR UPDATE SKIP LOCKED
)
UPDATE venturi_job SET state = 'available'
WHERE id = ANY(ARRAY(SELECT due.id FROM due UNION ALL SELECT timed_out.id FROM timed_out));

-- name: Claim :many
-- Claims up to max due plain jobs (see ClaimGated for the others) of the given kinds from one queue, most urgent first, then by
-- due time, then by ID, and opens a run on each under a fresh fencing token. One walk of
-- venturi_job_claim_queue_idx in that order: jobs of other kinds are stepped over and only
-- the rows taken are locked, so the cost follows the rows returned, not the kinds served.
WITH picked AS (
    SELECT j.id
    FROM venturi_job j
    WHERE j.state = 'available' AND j.part IS NULL AND j.queue = @queue::text AND j.kind = ANY(@kinds::text[])
      -- A paused queue starts nothing; a queue with a concurrency limit is claimed by
      -- ClaimGated, which enforces it.
      AND NOT EXISTS (SELECT 1 FROM venturi_queue vq WHERE vq.name = @queue::text AND (vq.paused OR vq.concurrency > 0))
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT @max::int
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE venturi_job j SET
        state            = 'running',
        runs             = j.runs + 1,
        lease_token      = nextval('venturi_lease_token_seq'),
        lease_expires_at = now() + interval '1 microsecond' * @lease_us::bigint,
        worker_id        = @worker_id::text,
        attempted_at     = now(),
        max_failures     = @max_failures::int
    -- An array, not a join: the planner then finds the rows by primary key whatever the
    -- table's size (joining picked, it chose a hash join over a full scan for batches of
    -- 1,000 rows in a 100,000-row table).
    WHERE j.id = ANY(ARRAY(SELECT picked.id FROM picked))
    RETURNING j.id, j.kind, j.payload, j.carry, j.runs, j.failures, j.lease_token, j.journal,
              j.journal_moved, j.attempted_at, j.priority, j.run_at, j.meta
)
-- An UPDATE returns its rows in whatever order its join produced them: order them again,
-- so that the worker starts them most urgent first.
SELECT c.id, c.kind, c.payload, c.carry, c.runs, c.failures, c.lease_token, c.journal,
       c.journal_moved, c.attempted_at, c.meta, c.run_at
FROM claimed c
ORDER BY c.priority DESC, c.run_at, c.id;

-- name: FinishRuns :many
-- Ends runs: one row per run, each fenced by its token. Rows whose token no longer
-- matches are not returned; their run was lost and its result is discarded. Each entry
-- is a one-element JSON array, built by the worker from the run's claim time (database
-- clock) plus its measured duration.
--
-- A run that was asked to stop (stop_event: replaced or cancelled) and reports anything
-- short of completing ends its job cancelled, whether or not its worker heard of the
-- request: its entry's event becomes the request's and its note starts with the reason.
--
-- The rows are found by the primary key (ANY of a subquery's array): a join alone was
-- planned, with some 50 to 100 runs on a small table, as a table scan. The plan is usually
-- a bitmap scan, which locks the rows in heap order, not ID order: no other statement may
-- wait for these rows while holding one of them. The worker's lease extension (ExtendLeases,
-- ID order) therefore leaves out the runs whose results are being written (it deadlocked
-- with this statement before); the rescue skips locked rows. Locking first in a CTE, as
-- ExtendLeases does, would cost a run a third more buffers and a WAL record on this hot
-- path.
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token, unnest(@states::text[]) AS state, unnest(@delays_us::bigint[]) AS delay_us, unnest(@failed::bool[]) AS failed, unnest(@set_carry::bool[]) AS set_carry, unnest(@carries::text[]) AS carry, unnest(@entries::text[]) AS entry
)
UPDATE venturi_job j SET
    -- j is the row as locked: a stop request that committed while this statement ran is seen.
    state            = (CASE WHEN j.stop_event IS NOT NULL AND u.state IN ('available', 'scheduled', 'waiting')
                             THEN 'cancelled' ELSE u.state END)::venturi_job_state,
    -- A waiting job's run_at is its wait's timeout.
    run_at           = CASE WHEN u.state IN ('available', 'scheduled', 'waiting') AND j.stop_event IS NULL
                            THEN now() + u.delay_us * interval '1 microsecond' ELSE j.run_at END,
    -- A run asked to stop ends as the request said, not as a failure.
    failures         = j.failures + (u.failed AND NOT (j.stop_event IS NOT NULL AND u.state IN ('available', 'scheduled', 'waiting')))::int,
    carry            = CASE WHEN u.set_carry THEN NULLIF(u.carry, '')::jsonb ELSE j.carry END,
    -- A plain job of a kind that has limits now goes back as a gated one.
    part             = CASE WHEN j.part IS NULL AND u.state IN ('available', 'scheduled', 'waiting')
                                 AND EXISTS (SELECT 1 FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)
                            THEN '' ELSE j.part END,
    lease_token      = NULL,
    lease_expires_at = NULL,
    finished_at      = CASE WHEN u.state IN ('completed', 'dead', 'cancelled') OR j.stop_event IS NOT NULL
                            THEN now() END,
    journal          = j.journal || CASE
        WHEN j.stop_event IS NULL THEN u.entry::jsonb
        WHEN u.state = 'cancelled' THEN jsonb_set(u.entry::jsonb, '{0,note}',
            to_jsonb(j.stop_note || COALESCE(': ' || NULLIF(u.entry::jsonb->0->>'note', ''), '')))
        -- The worker did not hear of the request: its entry for the run becomes the
        -- request's (one entry per run), its note kept after the reason.
        WHEN u.state IN ('available', 'scheduled', 'waiting') THEN jsonb_set(jsonb_set(u.entry::jsonb, '{0,event}', to_jsonb(j.stop_event)),
            '{0,note}', to_jsonb(j.stop_note || COALESCE(': ' || NULLIF(u.entry::jsonb->0->>'note', ''), '')))
        ELSE u.entry::jsonb END
FROM u
-- A matching token implies state = 'running' (CHECK venturi_job_running_has_lease).
WHERE j.id = ANY(ARRAY(SELECT u.id FROM u)) AND j.id = u.id AND j.lease_token = u.token
RETURNING j.id;

-- name: ReleaseUnstarted :many
-- Returns claimed jobs whose handler never started (shutdown) without recording a run. A
-- job that was asked to stop meanwhile (replaced, cancelled) ends cancelled instead. The
-- rows are locked in ID order first, as ExtendLeases locks them (see there).
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token
), locked AS (
    SELECT j.id FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT u.id FROM u))
      -- A matching token implies state = 'running' (CHECK venturi_job_running_has_lease).
      AND (j.id, j.lease_token) IN (SELECT u.id, u.token FROM u)
    ORDER BY j.id
    FOR NO KEY UPDATE OF j
)
UPDATE venturi_job j SET
    state = (CASE WHEN j.stop_event IS NULL THEN 'available' ELSE 'cancelled' END)::venturi_job_state,
    finished_at = CASE WHEN j.stop_event IS NOT NULL THEN now() END,
    journal = CASE WHEN j.stop_event IS NULL THEN j.journal
                   ELSE j.journal || jsonb_build_array(jsonb_build_object('event', j.stop_event, 'note', j.stop_note, 'at', now())) END,
    part = CASE WHEN j.part IS NULL AND EXISTS (SELECT 1 FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)
                THEN '' ELSE j.part END,
    runs = j.runs - 1, lease_token = NULL, lease_expires_at = NULL
WHERE j.id = ANY(ARRAY(SELECT locked.id FROM locked))
RETURNING j.id;

-- name: ExtendLeases :many
-- Extends the leases of one worker's running jobs in one statement, and reports which of
-- them were asked to stop (stop_event: replaced, cancelled). It does not wait for a run's
-- open StepTx: SaveStep holds only a key-share lock, which a no-key update does not
-- conflict with.
--
-- The rows are locked in ID order before they are updated, whatever plan finds them. An
-- UPDATE ... FROM unnest(ids) locks rows in its plan's order: with some 50 to 100 IDs the
-- planner hashed the array and scanned the table (heap order), so the extension and a
-- ReleaseUnstarted of the same worker, both given sorted IDs, deadlocked, and PostgreSQL
-- broke it only after deadlock_timeout, the extension's whole budget with a short lease:
-- every prefetched job's lease expired on a healthy worker (chaos/README.md, "Bugs
-- found"). The rows are found by primary key (ANY of a subquery's array, not a join the
-- planner may run as a table scan), and the LockRows above the sort takes them in order.
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token
), locked AS (
    SELECT j.id FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT u.id FROM u))
      -- A matching token implies state = 'running' (CHECK venturi_job_running_has_lease).
      AND (j.id, j.lease_token) IN (SELECT u.id, u.token FROM u)
    ORDER BY j.id
    FOR NO KEY UPDATE OF j
)
UPDATE venturi_job j SET lease_expires_at = now() + interval '1 microsecond' * @lease_us::bigint
WHERE j.id = ANY(ARRAY(SELECT locked.id FROM locked))
RETURNING j.id, COALESCE(j.stop_event, '')::text AS stop_event;

-- name: TryMaintenanceLock :one
-- The lock of lease rescue and promotion (maintainer.go): one worker at a time does them.
-- Nothing that waits for the stats or for retention holds it.
SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_maintenance', 0))::bool AS locked;

-- name: TryRetentionLock :one
-- The lock of retention (pruning finished jobs, events and idle gates): one worker at a
-- time prunes. A prune may wait for a stats sample (venturi_stats_forget share-locks the
-- stats state), so it never shares the maintenance lock or transaction with rescue.
SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_retention', 0))::bool AS locked;

-- name: TryStatsLock :one
-- The lock of the stats sample (ops_stats.go): one worker at a time samples.
SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_stats', 0))::bool AS locked;

-- name: RescueExpired :many
-- Ends runs whose lease expired (their worker died or stalled): an abandoned run counts as
-- a failure, so the backstop still applies. The job keeps its due time, and so its place
-- among the jobs that are due. A singleton service's run (its slot venturi.singleton:...)
-- is taken over instead: a dead worker is not the service's failure, so it neither counts
-- nor ends the job, whatever MaxFailures says; its journal entry says abandoned all the
-- same.
WITH expired AS (
    SELECT id, COALESCE(starts_with(slot_key, 'venturi.singleton:'), false) AS singleton FROM venturi_job
    WHERE state = 'running' AND lease_expires_at < now()
      -- After a database restart, give live workers one lease period to extend.
      AND now() - pg_postmaster_start_time() > interval '1 microsecond' * @min_uptime_us::bigint
    ORDER BY id
    LIMIT @max::int
    FOR UPDATE SKIP LOCKED
)
UPDATE venturi_job j SET
    state = CASE WHEN j.stop_event IS NOT NULL THEN 'cancelled'
                 WHEN j.max_failures > 0 AND j.failures + 1 >= j.max_failures AND NOT expired.singleton THEN 'dead'
                 ELSE 'available' END::venturi_job_state,
    finished_at = CASE WHEN j.stop_event IS NOT NULL
                         OR (j.max_failures > 0 AND j.failures + 1 >= j.max_failures AND NOT expired.singleton)
                       THEN now() END,
    -- A run that was asked to stop ends as the request said (replaced, cancelled), not as
    -- a failure: one entry for the run either way.
    failures = j.failures + (j.stop_event IS NULL AND NOT expired.singleton)::int,
    part = CASE WHEN j.part IS NULL AND EXISTS (SELECT 1 FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)
                THEN '' ELSE j.part END,
    lease_token = NULL,
    lease_expires_at = NULL,
    journal = j.journal || jsonb_build_array(jsonb_build_object(
        'event', COALESCE(j.stop_event, 'abandoned'),
        'note', COALESCE(j.stop_note || ': ', '') || 'lease expired: worker ' || COALESCE(j.worker_id, '?') || ' stopped extending it',
        'run', j.runs, 'token', j.lease_token, 'worker', j.worker_id,
        'started_at', j.attempted_at, 'at', clock_timestamp()))
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.kind, j.state, j.breaker;

-- name: PruneFinished :one
-- Deletes finished jobs past their retention, a batch at a time, and subtracts them from the
-- stats' finished counts (venturi_stats_forget, migration 13). Returns how many it deleted.
-- The rows are deleted by primary key (ANY of the batch's array): with IN (subquery) the
-- planner hashed the batch and scanned the whole table for every batch (a 300 MB table
-- under sustained load: 165 ms a batch; bench/FINDINGS.md section 14).
WITH doomed AS (
    SELECT id FROM venturi_job
    WHERE state = @state::venturi_job_state
      AND finished_at < now() - interval '1 microsecond' * @age_us::bigint
    ORDER BY finished_at
    LIMIT @max::int
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM venturi_job
    WHERE id = ANY(ARRAY(SELECT doomed.id FROM doomed))
    RETURNING queue, kind, state, finished_at
)
SELECT COALESCE(venturi_stats_forget(array_agg(g.queue), array_agg(g.kind), array_agg(g.state::text),
                                     array_agg(g.finished_at)), 0)::bigint AS deleted
FROM gone g;

-- name: LockGateStripes :exec
-- Every gate stripe's lock, in stripe order, as the gated claim takes them (so no locker
-- waits in a cycle): held to the end of the transaction, after which no claim is between
-- reading a rate window and recording its starts. Run it as its own statement, so that the
-- next statement's snapshot sees every claim that held them before.
SELECT count(pg_advisory_xact_lock(hashtext(current_schema() || '.venturi_gate'), s))
FROM generate_series(0, 63) AS s;

-- name: PruneIdleGates :one
-- Deletes the gates nothing uses any more among the next @max in key order after @after
-- (a sweep, by primary key): rate windows with no start inside their period, and breakers
-- that are closed or cooled down with no run of their kind (and partition) going, each
-- untouched for @idle_us. Forgetting such a gate changes no decision a claim makes but one:
-- a breaker's failures short of its threshold are forgotten with it. Runs after
-- LockGateStripes in the same transaction (rates are only written under those locks);
-- breaker rows are locked (a locked one is left for the next sweep) and checked again as
-- locked. Returns the gates scanned, the last key scanned and how many were deleted.
WITH scanned AS (
    SELECT g.key, g.kind, g.part, g.updated_at, g.open_until, g.probe_until, g.full_until
    FROM venturi_gate g
    WHERE g.key > @after::text
    ORDER BY g.key
    LIMIT @max::int
), idle AS (
    SELECT s.key FROM scanned s
    LEFT JOIN venturi_kind k ON k.kind = s.kind
    WHERE s.updated_at < now() - GREATEST(interval '1 microsecond' * @idle_us::bigint, COALESCE(k.rate_period, interval '0'))
      AND (s.full_until IS NULL OR s.full_until < now())
      AND (s.open_until IS NULL OR s.open_until < now())
      AND (s.probe_until IS NULL OR s.probe_until < now())
      AND (left(s.key, 1) <> 'b' OR NOT EXISTS (
          SELECT FROM venturi_job x
          WHERE x.state = 'running' AND x.part IS NOT NULL AND x.kind = s.kind
            AND (s.part IS NULL OR x.part = s.part)))
), locked AS (
    -- Checked again on the row as locked (a breaker recorded since the scan is not idle).
    SELECT g.key FROM venturi_gate g
    WHERE g.key = ANY(ARRAY(SELECT idle.key FROM idle))
      AND g.updated_at < now() - interval '1 microsecond' * @idle_us::bigint
    ORDER BY g.key
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM venturi_gate g
    WHERE g.key = ANY(ARRAY(SELECT locked.key FROM locked))
    RETURNING g.key
)
SELECT (SELECT count(*) FROM scanned)::int AS scanned,
       COALESCE((SELECT max(scanned.key) FROM scanned), '')::text AS last_key,
       (SELECT count(*) FROM gone)::int AS deleted;

-- name: GetJob :one
-- The job and, when its kind has a breaker that has seen a claim, the breaker it reports
-- to (CircuitOf's join, in the same statement: Queue.Job is one round trip).
SELECT j.id, j.kind, j.state, j.priority, j.dedup_key, j.payload, j.carry, j.run_at, j.runs, j.failures, j.journal,
       j.journal_moved, j.journal_dropped, j.created_at, j.attempted_at, j.finished_at, j.lease_expires_at,
       j.queue, j.part, j.slot_key, j.slot_limit, j.slot_policy, j.stop_requested_at, j.stop_event, j.stop_note,
       j.worker_id, j.meta,
       (b.threshold IS NOT NULL)::bool AS has_breaker,
       COALESCE(b.fails, 0)::int AS brk_fails, b.open_until AS brk_open_until, b.probe_until AS brk_probe_until,
       COALESCE(b.updated_at, j.created_at)::timestamptz AS brk_updated_at, COALESCE(b.threshold, 0)::int AS brk_threshold
FROM venturi_job j
LEFT JOIN LATERAL (
    SELECT g.fails, g.open_until, g.probe_until, g.updated_at, k.brk_failures::int AS threshold
    FROM venturi_kind k
    JOIN venturi_gate g ON g.key = 'b' || chr(31) || k.kind || CASE WHEN k.brk_by_part THEN chr(31) || COALESCE(j.part, '') ELSE '' END
    WHERE k.kind = j.kind AND k.brk_failures > 0
) b ON true
WHERE j.id = @id;

-- name: CountJobs :many
SELECT kind, state, count(*)::bigint AS jobs
FROM venturi_job
GROUP BY kind, state
ORDER BY kind, state;

-- name: InsertOrReplace :one
-- The dedup enqueue of a task type without a merge method (its decision is always
-- Replace), in one statement: replace the newest pending job with the key, or insert.
-- Runs after DedupLock in the same transaction. Returns NULL id unless READ COMMITTED.
WITH t AS (
    SELECT COALESCE(sqlc.narg(at)::timestamptz, now()) + interval '1 microsecond' * @delay_us::bigint AS at
), cand AS (
    SELECT j.id FROM venturi_job j
    WHERE j.kind = @kind AND j.dedup_key = @dedup_key::text AND j.state IN ('scheduled', 'available')
      AND current_setting('transaction_isolation') = 'read committed'
    ORDER BY j.id DESC
    LIMIT 1
    FOR UPDATE
), upd AS (
    UPDATE venturi_job j SET
        payload  = (@payload::text)::jsonb,
        priority = @priority,
        carry    = NULL,
        queue    = @queue::text,
        part     = COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)),
        slot_key = sqlc.narg(slot_key)::text, slot_limit = sqlc.narg(slot_limit)::int, slot_policy = sqlc.narg(slot_policy)::smallint,
        run_at   = LEAST(j.run_at, t.at),
        state    = CASE WHEN LEAST(j.run_at, t.at) <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
        -- A merge that opts in to the event stream opts the job in (never out).
        events   = j.events OR @events::bool,
        journal  = j.journal || jsonb_build_array((@entry::text)::jsonb
            || jsonb_build_object('at', now(), 'due_before', j.run_at, 'due_after', LEAST(j.run_at, t.at)))
    FROM cand, t
    WHERE j.id = cand.id
    RETURNING j.id, j.state
), ins AS (
    INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta)
    SELECT @id, @kind, @queue::text, CASE WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
           @priority, @dedup_key::text, (@payload::text)::jsonb, t.at,
           COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = @kind AND vk.limited)),
           sqlc.narg(slot_key)::text, sqlc.narg(slot_limit)::int, sqlc.narg(slot_policy)::smallint,
           sqlc.arg(events)::bool, sqlc.narg(meta)::jsonb
    FROM t
    WHERE NOT EXISTS (SELECT 1 FROM cand)
      AND current_setting('transaction_isolation') = 'read committed'
    RETURNING venturi_job.id, venturi_job.state
)
SELECT COALESCE((SELECT id FROM upd), (SELECT id FROM ins))::uuid AS job_id,
       EXISTS (SELECT 1 FROM upd)::bool AS replaced,
       COALESCE((SELECT state = 'available' FROM upd), (SELECT state = 'available' FROM ins), false)::bool AS due;

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
FROM venturi_job j
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

-- name: NextDue :one
-- How long until the next scheduled job of the given kinds in the queue is due (database clock), in
-- microseconds; 0 when one is already due, -1 when none is scheduled. An idle worker
-- sleeps until then instead of waiting for its poll. Also whether the queue is paused (a
-- worker that learns it releases the jobs it holds).
-- (GREATEST ignores NULLs: GREATEST(min(run_at) - now(), '0') was 0, "due now", when
-- nothing is scheduled, and an idle worker claimed again at once, in a loop.)
SELECT (CASE WHEN min(run_at) IS NULL THEN -1
             ELSE GREATEST(EXTRACT(EPOCH FROM min(run_at) - now()) * 1000000, 0) END)::bigint AS due_in_us,
       COALESCE((SELECT vq.paused FROM venturi_queue vq WHERE vq.name = @queue::text), false)::bool AS paused
FROM (
    (SELECT run_at FROM venturi_job
     WHERE state = 'scheduled' AND queue = @queue::text AND kind = ANY(@kinds::text[])
     ORDER BY run_at
     LIMIT 1)
    UNION ALL
    (SELECT run_at FROM venturi_job -- a wait's timeout
     WHERE state = 'waiting' AND queue = @queue::text AND kind = ANY(@kinds::text[])
     ORDER BY run_at
     LIMIT 1)
) s;

-- name: JournalPage :many
-- Up to max entries of one job's journal numbered below before (its whole journal when
-- before is NULL), newest first: the entries still in the job's row and those moved to
-- venturi_journal, read in one snapshot.
SELECT e.seq::bigint AS seq, e.entry::jsonb AS entry
FROM (
    SELECT j.journal_moved + r.ord AS seq, r.entry
    FROM venturi_job j, jsonb_array_elements(j.journal) WITH ORDINALITY AS r(entry, ord)
    WHERE j.id = @id
    UNION ALL
    SELECT m.seq, m.entry
    FROM venturi_journal m
    WHERE m.job_id = @id AND m.seq < COALESCE(sqlc.narg(before)::bigint, 9223372036854775807)
) e
WHERE e.seq < COALESCE(sqlc.narg(before)::bigint, 9223372036854775807)
ORDER BY e.seq DESC
LIMIT @max::int;

-- name: ClaimGated :many
-- Claims up to max gated jobs (slots, partitions, kinds with limits; every job of a queue
-- with a concurrency limit) from one queue: see venturi_claim_gated in migration 12. A row
-- with a NULL id is not a job: its wake_in_us says when a job held back by a rate or a
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

-- name: SetQueuePaused :exec
INSERT INTO venturi_queue (name, paused) VALUES (@name::text, @paused::bool)
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now();

-- name: SetQueueConcurrency :exec
INSERT INTO venturi_queue (name, concurrency) VALUES (@name::text, @concurrency::int)
ON CONFLICT (name) DO UPDATE SET concurrency = EXCLUDED.concurrency, updated_at = now();

-- name: ListQueues :many
-- Every queue that has jobs or settings, with its settings and job counts.
WITH names AS (
    SELECT name FROM venturi_queue
    UNION
    SELECT DISTINCT queue FROM venturi_job WHERE state IN ('available', 'running', 'scheduled')
)
SELECT n.name::text AS name, COALESCE(q.paused, false)::bool AS paused,
       COALESCE(q.concurrency, 0)::int AS concurrency,
       (SELECT count(*) FROM venturi_job j WHERE j.queue = n.name AND j.state = 'available')::bigint AS available,
       (SELECT count(*) FROM venturi_job j WHERE j.queue = n.name AND j.state = 'running')::bigint AS running,
       (SELECT count(*) FROM venturi_job j WHERE j.queue = n.name AND j.state = 'scheduled')::bigint AS scheduled
FROM names n LEFT JOIN venturi_queue q ON q.name = n.name
ORDER BY n.name;

-- name: SetKindLimits :one
-- Records a kind's limits (a worker that registers the kind writes them at start). It
-- reports whether the kind had none before, so that the caller can gate the kind's
-- pending jobs that were enqueued as plain ones.
WITH old AS (SELECT k.limited FROM venturi_kind k WHERE k.kind = @kind::text)
INSERT INTO venturi_kind AS k (kind, concurrency, rate_n, rate_period, rate_by_part, brk_failures, brk_cooldown, brk_by_part)
VALUES (@kind::text, @concurrency::int, @rate_n::int, interval '1 microsecond' * @rate_period_us::bigint, @rate_by_part::bool,
        @brk_failures::int, interval '1 microsecond' * @brk_cooldown_us::bigint, @brk_by_part::bool)
ON CONFLICT (kind) DO UPDATE SET
    concurrency = EXCLUDED.concurrency, rate_n = EXCLUDED.rate_n, rate_period = EXCLUDED.rate_period,
    rate_by_part = EXCLUDED.rate_by_part, brk_failures = EXCLUDED.brk_failures,
    brk_cooldown = EXCLUDED.brk_cooldown, brk_by_part = EXCLUDED.brk_by_part, updated_at = now()
WHERE (k.concurrency, k.rate_n, k.rate_period, k.rate_by_part, k.brk_failures, k.brk_cooldown, k.brk_by_part)
      IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.rate_n, EXCLUDED.rate_period, EXCLUDED.rate_by_part,
                        EXCLUDED.brk_failures, EXCLUDED.brk_cooldown, EXCLUDED.brk_by_part)
RETURNING NOT COALESCE((SELECT old.limited FROM old), false) AS newly_limited, k.limited;

-- name: GatePendingOfKind :execrows
-- Makes a kind's plain pending jobs gated, once the kind has limits. One pass over the
-- table: it runs when a kind's limits first appear, in the transaction that records them.
-- (Running ones are gated when they return to pending: see FinishRuns.)
UPDATE venturi_job SET part = ''
WHERE kind = @kind::text AND part IS NULL AND state IN ('available', 'scheduled', 'waiting');

-- name: BreakerRecord :many
-- Reports run outcomes to their breakers, in the order given (sorted by key).
SELECT key::text AS key, kind::text AS kind, COALESCE(part, '')::text AS part, opened::bool AS opened,
       fails::int AS fails, COALESCE(open_until, 'epoch')::timestamptz AS open_until
FROM venturi_breaker_record(@keys::text[], @failed::bool[]);

-- name: ListCircuits :many
-- Every breaker with its state, for Queue.Circuits.
SELECT g.kind, g.part, g.fails, g.open_until, g.probe_until, g.updated_at,
       COALESCE(k.brk_failures, 0)::int AS threshold
FROM venturi_gate g LEFT JOIN venturi_kind k ON k.kind = g.kind
WHERE left(g.key, 1) = 'b'
ORDER BY g.kind, g.part NULLS FIRST;

-- name: ListCircuitsAfter :many
-- One page of the breakers for Queue.ListCircuits: those whose key comes after @after
-- (empty for the first page), at most @max, in key order (the letter b, the kind and the
-- partition joined by chr(31): by kind, a kind-wide breaker first, then by partition). A
-- range of the primary key: every breaker key sorts from 'b' to 'c' in any collation that
-- compares the first letter first; left(key, 1) keeps out any other key.
SELECT g.key, g.kind, g.part, g.fails, g.open_until, g.probe_until, g.updated_at,
       COALESCE(k.brk_failures, 0)::int AS threshold
FROM venturi_gate g LEFT JOIN venturi_kind k ON k.kind = g.kind
WHERE g.key > @after::text AND g.key >= 'b' AND g.key < 'c' AND left(g.key, 1) = 'b'
ORDER BY g.key
LIMIT @max::int;

-- name: CancelLocked :one
-- Cancels jobs that the transaction has locked (LockJobForSignal, LockJobs), so that this
-- statement's snapshot sees them as locked: a pending or waiting job ends cancelled at
-- once; a running one is asked to stop (its run's end makes it cancelled, see FinishRuns);
-- a finished one is left as it is. Reports how many ended and which were asked to stop.
WITH ended AS (
    UPDATE venturi_job x SET
        state = 'cancelled', finished_at = now(),
        journal = x.journal || jsonb_build_array(jsonb_build_object('event', 'cancelled', 'note', @note::text, 'at', now()))
    -- An array the planner cannot size: it then finds the rows by primary key.
    WHERE x.id = ANY(ARRAY(SELECT unnest(@ids::uuid[]))) AND x.state IN ('scheduled', 'available', 'waiting')
    RETURNING x.id
), asked AS (
    UPDATE venturi_job x SET stop_requested_at = now(), stop_event = 'cancelled', stop_note = @note::text
    WHERE x.id = ANY(ARRAY(SELECT unnest(@ids::uuid[]))) AND x.state = 'running' AND x.stop_event IS NULL
    RETURNING x.id
)
SELECT (SELECT count(*) FROM ended)::bigint AS ended,
       COALESCE((SELECT array_agg(asked.id) FROM asked), '{}')::uuid[] AS asked;

-- name: JobsByKey :many
-- The jobs of a kind with a dedup key that have not ended, for CancelByKey: pending ones
-- through the dedup index, the others among the running and waiting.
SELECT t.id FROM venturi_job t
WHERE t.kind = @kind::text AND t.dedup_key = @dedup_key::text AND t.state IN ('scheduled', 'available')
UNION ALL
SELECT t.id FROM venturi_job t
WHERE t.state IN ('running', 'waiting') AND t.kind = @kind::text AND t.dedup_key = @dedup_key::text
ORDER BY 1;

-- name: AwaitJob :one
-- Registers a waiter's channel on a job that has not ended; it returns no row when the job
-- has ended (or does not exist).
UPDATE venturi_job SET await_channel = @channel::text
WHERE id = @id AND state IN ('scheduled', 'available', 'running', 'waiting')
RETURNING id;

-- name: EndedJobs :many
-- Which of the given jobs have ended or are gone: the awaiters' poll, one statement for
-- all the waiters of a process.
SELECT w.id::uuid AS id
FROM unnest(@ids::uuid[]) AS w(id)
LEFT JOIN venturi_job j ON j.id = w.id
WHERE j.id IS NULL OR j.state IN ('completed', 'dead', 'cancelled');

-- name: ArmWaits :many
-- Sets what the just-finished runs' jobs (now waiting, locked by this transaction) wait
-- for; a job for which a matching signal already arrived is available again at once.
-- Signals sent from now on wait for this transaction's row locks and see the waits.
UPDATE venturi_job j SET
    wait_signals = string_to_array(u.names, chr(31)),
    state = (CASE WHEN w.ready THEN 'available' ELSE 'waiting' END)::venturi_job_state,
    run_at = CASE WHEN w.ready THEN now() ELSE j.run_at END
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@names::text[]) AS names) AS u
CROSS JOIN LATERAL (
    SELECT EXISTS (SELECT 1 FROM venturi_signal s
                   WHERE s.job_id = u.id AND s.consumed_token IS NULL
                     AND s.name = ANY(string_to_array(u.names, chr(31)))) AS ready
) w
WHERE j.id = u.id AND j.state = 'waiting'
RETURNING j.id, j.kind, (j.state = 'available')::bool AS ready;

-- name: ConsumeSignals :exec
-- Marks the signals the just-finished runs read as consumed by them: one (job, run's
-- token, signal seq) per signal.
UPDATE venturi_signal s SET consumed_token = u.token, consumed_at = now()
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token, unnest(@seqs::bigint[]) AS seq) AS u
WHERE s.job_id = u.id AND s.seq = u.seq AND s.consumed_token IS NULL;

-- name: PendingSignals :many
-- The signals of a job that no run has consumed, oldest first; only those named in names
-- when names is not empty.
SELECT seq, name, payload, delivery_id, sent_at
FROM venturi_signal
WHERE job_id = @id AND consumed_token IS NULL
  AND (cardinality(@names::text[]) = 0 OR name = ANY(@names::text[]))
ORDER BY seq
LIMIT @max::int;

-- name: LockJobForSignal :one
-- Locks a job for a signal; SendSignal follows in the same transaction, with a snapshot
-- that sees the job as locked.
SELECT state, kind FROM venturi_job WHERE id = @id FOR UPDATE;

-- name: SendSignal :one
-- Stores a signal for a job that has not ended and wakes it if it waits for that name. A
-- repeated delivery ID stores nothing. Returns whether the signal is new and whether it
-- woke the job. Runs after LockJobForSignal, in its transaction.
WITH ins AS (
    INSERT INTO venturi_signal (job_id, name, payload, delivery_id)
    SELECT t.id, @name::text, (@payload::text)::jsonb, @delivery_id::text
    FROM venturi_job t WHERE t.id = @id AND t.state NOT IN ('completed', 'dead', 'cancelled')
    ON CONFLICT (job_id, delivery_id) DO NOTHING
    RETURNING seq
), woke AS (
    UPDATE venturi_job j SET state = 'available', run_at = now()
    WHERE j.id = @id AND j.state = 'waiting' AND @name::text = ANY(j.wait_signals)
      AND EXISTS (SELECT 1 FROM ins)
    RETURNING j.id
)
SELECT EXISTS (SELECT 1 FROM ins)::bool AS stored, EXISTS (SELECT 1 FROM woke)::bool AS woke;

-- name: JobByKey :one
-- The newest job of a kind with a dedup key that has not ended, for signals by key.
SELECT id FROM venturi_job
WHERE kind = @kind::text AND dedup_key = @dedup_key::text AND state IN ('scheduled', 'available', 'running', 'waiting')
ORDER BY id DESC
LIMIT 1;

-- name: CreateHook :exec
INSERT INTO venturi_hook (token_hash, job_id, name, reusable, expires_at)
VALUES (@token_hash, @job_id, @name::text, @reusable::bool, now() + interval '1 microsecond' * @ttl_us::bigint);

-- name: UseHook :one
-- Takes a hook for one use: it must exist, be neither disposed nor expired, and be unused
-- unless reusable. Marks it used. No row: the token does not resume anything.
UPDATE venturi_hook SET used_at = now()
WHERE token_hash = @token_hash AND disposed_at IS NULL AND expires_at > now()
  AND (reusable OR used_at IS NULL)
RETURNING job_id, name, reusable;

-- name: DisposeHook :execrows
UPDATE venturi_hook SET disposed_at = now()
WHERE token_hash = @token_hash AND disposed_at IS NULL;

-- name: StepResult :one
SELECT result FROM venturi_step WHERE job_id = @job_id AND name = @name::text;

-- name: SaveStep :execrows
-- Memoizes a step's result for a run that still holds its job (its token matches); a lost
-- run saves nothing. An earlier memo of the name is kept.
-- The job's row is key-share locked until the memo commits. A rescue (FOR UPDATE SKIP
-- LOCKED) passes the row by meanwhile, and a cancel or a delete waits for it, so a run that
-- saved a memo still held its job when the memo committed, and a run that lost its job
-- saves nothing (the lock re-reads the row's token). The lock does not conflict with the
-- lease extension or a stop request (no-key updates), so an open StepTx holds up neither.
INSERT INTO venturi_step (job_id, name, result, run, token)
SELECT j.id, @name::text, (@result::text)::jsonb, j.runs, j.lease_token
FROM venturi_job j
WHERE j.id = @job_id AND j.lease_token = @token
FOR KEY SHARE OF j
ON CONFLICT (job_id, name) DO NOTHING;

-- name: JobSteps :many
SELECT name, result, run, at FROM venturi_step WHERE job_id = @job_id ORDER BY at, name;

-- name: EnsureSingleton :one
-- Creates the one live job of a singleton kind unless it exists (venturi_job_singleton_idx
-- makes this exact under any number of concurrent workers), and returns the live job.
-- job_id is NULL only when the live job committed after this statement's snapshot: retry.
WITH ins AS (
    INSERT INTO venturi_job (id, kind, queue, state, priority, payload, run_at, part, slot_key, slot_limit, slot_policy, events)
    VALUES (@id, @kind, @queue::text, 'available', @priority, (@payload::text)::jsonb, now(), @slot_key::text, @slot_key::text, 1, 0, @events::bool)
    ON CONFLICT (kind) WHERE slot_key LIKE 'venturi.singleton:%' AND state IN ('scheduled', 'available', 'running', 'waiting')
    DO NOTHING
    RETURNING id
)
SELECT COALESCE((SELECT id FROM ins),
                (SELECT j.id FROM venturi_job j
                 WHERE j.kind = @kind AND j.slot_key LIKE 'venturi.singleton:%'
                   AND j.state IN ('scheduled', 'available', 'running', 'waiting')
                 LIMIT 1))::uuid AS job_id,
       EXISTS (SELECT 1 FROM ins)::bool AS inserted;

-- name: Singletons :many
-- The live singleton jobs, with their owner while running and their last journal entry.
SELECT id, kind, state, queue, worker_id, attempted_at, run_at, runs, failures, created_at,
       lease_expires_at, COALESCE(journal -> -1, 'null'::jsonb)::jsonb AS last_entry
FROM venturi_job
WHERE slot_key LIKE 'venturi.singleton:%' AND state IN ('scheduled', 'available', 'running', 'waiting')
ORDER BY kind;

-- name: SaveCarry :execrows
-- A running job's checkpoint (Run.Checkpoint), fenced by the run's token: no row when the
-- run lost its job.
UPDATE venturi_job SET carry = NULLIF(@carry::text, '')::jsonb
WHERE id = @id AND lease_token = @token;

-- ---- durable cron (migration 9) -------------------------------------------------------

-- name: CronLock :one
-- A schedule's row, locked for a registration, a pause or a resume, with the database
-- time and whether its payload equals payload. No row: the schedule does not exist.
SELECT c.spec, c.time_zone, c.kind, c.queue, c.priority, c.payload::text AS payload, c.dedup_key,
       c.part, c.slot_key, c.slot_limit, c.slot_policy, c.missed, c.backfill, c.grace_us,
       c.paused, c.next_fire, c.last_fire, c.skipped_pending, now()::timestamptz AS now,
       (c.payload = (@payload::text)::jsonb)::bool AS same_payload
FROM venturi_cron c WHERE c.name = @name::text
FOR UPDATE;

-- name: CronNow :one
SELECT now()::timestamptz AS now;

-- name: CronInsert :execrows
-- Creates a schedule unless one of the name exists (a concurrent registration won).
INSERT INTO venturi_cron (name, spec, time_zone, kind, queue, priority, payload, dedup_key, part,
                          slot_key, slot_limit, slot_policy, missed, backfill, grace_us, next_fire)
VALUES (@name::text, @spec::text, @time_zone::text, @kind::text, @queue::text, @priority, (@payload::text)::jsonb,
        @dedup_key::text, sqlc.narg(part)::text, sqlc.narg(slot_key)::text, sqlc.narg(slot_limit)::int,
        sqlc.narg(slot_policy)::smallint, @missed::text, @backfill::int, @grace_us::bigint, @next_fire::timestamptz)
ON CONFLICT (name) DO NOTHING;

-- name: CronUpdate :exec
-- A changed definition; next_fire is recomputed by the caller when the time rule changed.
UPDATE venturi_cron SET spec = @spec::text, time_zone = @time_zone::text, kind = @kind::text,
    queue = @queue::text, priority = @priority, payload = (@payload::text)::jsonb, dedup_key = @dedup_key::text,
    part = sqlc.narg(part)::text, slot_key = sqlc.narg(slot_key)::text, slot_limit = sqlc.narg(slot_limit)::int,
    slot_policy = sqlc.narg(slot_policy)::smallint, missed = @missed::text, backfill = @backfill::int,
    grace_us = @grace_us::bigint, next_fire = @next_fire::timestamptz, skipped_pending = @skipped_pending::int,
    updated_at = now()
WHERE name = @name::text;

-- name: CronSetPaused :exec
-- Pauses or resumes a locked schedule; a resume sets the next fire after now.
UPDATE venturi_cron SET paused = @paused::bool, next_fire = @next_fire::timestamptz,
    paused_at = CASE WHEN @paused::bool THEN now() END
WHERE name = @name::text;

-- name: CronDelete :execrows
DELETE FROM venturi_cron WHERE name = @name::text;

-- name: CronDue :one
-- The earliest due schedule that no other worker is firing, locked, with the database
-- time (or the test's). Schedules in skip failed to load in this worker (an unknown time
-- zone, an expression of a newer version) and are left to others.
SELECT c.name, c.spec, c.time_zone, c.kind, c.dedup_key, c.missed, c.backfill, c.grace_us,
       c.next_fire, c.skipped_pending, t.now::timestamptz AS now
FROM (SELECT COALESCE(sqlc.narg(now)::timestamptz, now()) AS now) t
JOIN venturi_cron c ON NOT c.paused AND c.next_fire <= t.now AND c.name <> ALL(@skip::text[])
ORDER BY c.next_fire
LIMIT 1
FOR UPDATE OF c SKIP LOCKED;

-- name: CronFire :one
-- One fire of a locked schedule: its ledger row and its job, in one statement. A schedule
-- with a dedup key merges (keeps) into a pending job of its kind and key instead of adding
-- one. A fire time already in the ledger enqueues nothing (action '').
WITH cand AS (
    SELECT j.id FROM venturi_job j
    WHERE @dedup_key::text <> '' AND j.kind = @kind::text AND j.dedup_key = @dedup_key::text
      AND j.state IN ('scheduled', 'available')
    ORDER BY j.id DESC
    LIMIT 1
), fire AS (
    INSERT INTO venturi_cron_fire (schedule, fire_at, job_id, action, covers, skipped)
    SELECT @name::text, @fire_at::timestamptz, COALESCE((SELECT id FROM cand), @id::uuid),
           CASE WHEN EXISTS (SELECT 1 FROM cand) THEN 'kept' ELSE 'inserted' END,
           @covers::int, @skipped::int
    ON CONFLICT (schedule, fire_at) DO NOTHING
    RETURNING job_id, action
), ins AS (
    INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, part, slot_key, slot_limit, slot_policy)
    SELECT f.job_id, c.kind, c.queue,
           CASE WHEN @fire_at::timestamptz <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
           c.priority, NULLIF(c.dedup_key, ''), c.payload, @fire_at::timestamptz,
           COALESCE(c.part, (SELECT '' FROM venturi_kind vk WHERE vk.kind = c.kind AND vk.limited)),
           c.slot_key, c.slot_limit, c.slot_policy
    FROM fire f JOIN venturi_cron c ON c.name = @name::text
    WHERE f.action = 'inserted'
    RETURNING id
)
SELECT f.job_id, f.action FROM fire f;

-- name: CronAdvance :exec
-- Moves a fired schedule past what it handled, in the fires' transaction.
UPDATE venturi_cron SET next_fire = @next_fire::timestamptz,
    last_fire = COALESCE(sqlc.narg(last_fire)::timestamptz, last_fire),
    last_job = COALESCE(sqlc.narg(last_job)::uuid, last_job),
    last_run_at = now(), fires = fires + @fires::int, skipped = skipped + @skipped::int,
    coalesced = coalesced + @coalesced::int, skipped_pending = @skipped_pending::int
WHERE name = @name::text;

-- name: CronNextDue :one
-- How long until the earliest schedule is due, by the database clock (no row: none).
SELECT (EXTRACT(EPOCH FROM (next_fire - now())) * 1000000)::bigint AS due_in_us
FROM venturi_cron WHERE NOT paused
ORDER BY next_fire
LIMIT 1;

-- name: CronList :many
SELECT name, spec, time_zone, kind, queue, priority, payload, dedup_key, missed, backfill, grace_us,
       paused, paused_at, next_fire, last_fire, last_job, last_run_at, fires, skipped, coalesced,
       created_at, updated_at
FROM venturi_cron
WHERE sqlc.narg(name)::text IS NULL OR name = sqlc.narg(name)::text
ORDER BY name;

-- name: CronFires :many
-- A schedule's ledger, newest fire first.
SELECT fire_at, job_id, action, covers, skipped, enqueued_at
FROM venturi_cron_fire
WHERE schedule = @name::text AND (sqlc.narg(before)::timestamptz IS NULL OR fire_at < sqlc.narg(before)::timestamptz)
ORDER BY fire_at DESC
LIMIT @max::int;

-- name: CronPruneFires :execrows
-- Deletes ledger rows older than the retention, a batch at a time.
DELETE FROM venturi_cron_fire
WHERE ctid = ANY (ARRAY(SELECT ctid FROM venturi_cron_fire
                        WHERE enqueued_at < now() - interval '1 microsecond' * @age_us::bigint
                        LIMIT @max::int));
-- ---- Lifecycle events (migration 10) ---------------------------------------------------

-- name: ReadEvents :many
-- Up to max events after the cursor (after_xid, after_seq), in (xid, seq) order, of
-- transactions older than every transaction still running: a transaction that has not
-- ended cannot add an event below what this returns, so a reader that resumes from the
-- last row misses nothing and repeats nothing.
SELECT e.xid::text AS xid, e.seq, e.at, e.job_id, e.kind, e.queue, e.event, e.run, e.state,
       COALESCE(e.note, '')::text AS note, COALESCE(e.worker, '')::text AS worker, e.started_at,
       e.run_at, COALESCE(e.delay_us, 0)::bigint AS delay_us, e.meta
FROM venturi_event e
WHERE (e.xid, e.seq) > ((@after_xid::text)::xid8, @after_seq::bigint)
  AND e.xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY e.xid, e.seq
LIMIT @max::int;

-- name: EventsTail :one
-- A cursor before every event that a transaction still running, or a later one, writes.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xid;

-- name: EventsChannel :one
SELECT venturi_events_channel()::text AS channel;

-- name: PruneEvents :execrows
DELETE FROM venturi_event
WHERE (xid, seq) IN (
    SELECT xid, seq FROM venturi_event
    WHERE at < now() - interval '1 microsecond' * @age_us::bigint
    ORDER BY at
    LIMIT @max::int
);

-- name: JobMeta :one
SELECT meta FROM venturi_job WHERE id = @id;

-- ---- Operations: stats (migration 13) ----------------------------------------------------

-- name: StatsBegin :one
-- The sampler's state, locked for the sample's transaction (the maintenance lock is held),
-- with the database time of the sample.
SELECT s.sampled_at, s.interval_us, s.counted_through, s.recounted_at, s.recount_every_us,
       now()::timestamptz AS now
FROM venturi_stats_state s
FOR UPDATE;

-- name: SetLocalStatementTimeout :exec
-- Bounds every later statement of the transaction.
SELECT set_config('statement_timeout', @ms::text, true);

-- name: SetLocalIdleTimeout :exec
-- Ends the transaction (and its session) on the server once it has been idle between
-- statements for ms: a worker cut off by a half-open network must not keep the locks of a
-- transaction it can no longer finish. Also what SetLocalIndexScans sets: the claim's
-- transaction starts with this one statement.
SELECT set_config('idle_in_transaction_session_timeout', @ms::text, true),
       set_config('enable_seqscan', 'off', true);

-- name: SetLocalIndexScans :exec
-- For the rest of the transaction (a pipeline's implicit one included), plans reach rows
-- by index rather than by scanning whole tables. The statements of the claim, finish,
-- lease-extension, release and maintenance paths take a batch of jobs that an index finds;
-- PostgreSQL caches their plans per connection, and a plan made while venturi_job was
-- (nearly) empty, in a fresh schema's first seconds, scanned the whole table for every
-- batch however large the table grew, until autovacuum's first ANALYZE replaced it: a
-- worker fell 56,000 jobs behind in the first 10 s of a 10,000 jobs/s load
-- (bench/FINDINGS.md section 14).
SELECT set_config('enable_seqscan', 'off', true);

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

-- name: StatsSampledAt :one
SELECT sampled_at FROM venturi_stats_state;

-- name: StatsHistory :many
-- The newest max samples since the given time, at most the last 24 hours, newest first.
SELECT at, queue, available, running, scheduled, waiting, lag_us, completed_per_sec, failed_per_sec, dead_per_sec
FROM venturi_stats_history
WHERE at >= GREATEST(@since::timestamptz, now() - interval '24 hours')
ORDER BY at DESC, queue DESC
LIMIT @max::int;

-- ---- Operations: listing jobs (migration 13) ---------------------------------------------

-- name: ListSettings :exec
-- The listing's transaction: every statement bounded by statement_timeout, planned for its
-- own parameters (ListJobs folds the branches and filters it does not use away, which a
-- generic plan cannot), without parallel workers (a page reads a page of rows; a worker's
-- start costs more, and the branches that fold away would still start theirs) and without
-- JIT (the branches' never-executed scans are priced high enough to compile the query:
-- 50-150 ms for a page that reads a few buffers).
SELECT set_config('statement_timeout', @timeout_ms::text, true),
       set_config('plan_cache_mode', 'force_custom_plan', true),
       set_config('max_parallel_workers_per_gather', '0', true),
       set_config('jit', 'off', true);

-- name: ListJobs :many
-- One page of the jobs that match a filter, in one of the listing orders (order_by): each
-- branch below walks one index in its order from the cursor, and the planner drops the
-- branches and filters whose parameters rule them out (the transaction plans every
-- execution for its parameters, see ListSettings). The filter (m) is written once and
-- inlined into the branch that runs.
--   id        every state: newest first by ID (the primary key); cursor c_id
--   run_at    one state, scheduled or waiting: by due time, then ID; cursor (c_ts, c_id)
--   lease     running: by lease expiry, then ID
--   finished  one state, completed, dead or cancelled: newest finished first
--   plain     available plain jobs of queue c_queue in claim order, from segment seg:
--             0 from the start, 1 after (c_prio, c_ts, c_id) in the same priority, 2 below
--             priority c_prio
--   gated     available gated jobs of c_queue by partition, then in claim order: seg 0 from
--             the start, 1 and 2 as plain within partition c_part, 3 after partition c_part
-- The predicates no index serves (a note, payload or attachment match, a dedup key without
-- a kind: key_search; with kinds, dedup_key may use the dedup index) are not in m's
-- WHERE but its hit column: a branch reads at most scan jobs of its range (its search
-- window) and returns the first max that hit, or, when the window ends first, the hits
-- and the window's last job with hit false (where the next page resumes). Without such a
-- predicate hit is true and scan is max: the branch reads max jobs. The branch returns
-- the page's IDs in its order; the caller sorts the rows again (the join that reads them
-- may not keep it). summary false skips the journal (the bulk actions' walk reads only
-- IDs and states).
WITH m AS NOT MATERIALIZED (
    SELECT j.id, j.queue, j.state, j.priority, j.part, j.run_at, j.finished_at, j.lease_expires_at,
           ((@key_search::text = '' OR j.dedup_key IS NOT DISTINCT FROM @key_search::text)
            AND (@note_pattern::text = '' OR EXISTS (
                SELECT 1 FROM jsonb_array_elements(j.journal) AS e(x) WHERE e.x->>'note' ILIKE @note_pattern::text))
            AND (cardinality(@payload_paths::text[]) = 0 OR NOT EXISTS (
                SELECT 1 FROM (SELECT unnest(@payload_paths::text[]) AS p, unnest(@payload_values::text[]) AS v) pm
                WHERE venturi_json_text(j.payload, string_to_array(pm.p, chr(31))) IS DISTINCT FROM pm.v))
            AND (cardinality(@attachment_paths::text[]) = 0 OR NOT EXISTS (
                SELECT 1 FROM (SELECT unnest(@attachment_paths::text[]) AS p, unnest(@attachment_values::text[]) AS v) am
                WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(j.journal) AS e(x)
                                  WHERE venturi_json_text(e.x->'attachment', string_to_array(am.p, chr(31))) = am.v)))
           ) AS hit
    FROM venturi_job j
    WHERE (cardinality(@ids::uuid[]) = 0 OR j.id = ANY(@ids::uuid[]))
      AND (cardinality(@states::text[]) = 0 OR j.state = ANY((@states::text[])::venturi_job_state[]))
      AND (cardinality(@kinds::text[]) = 0 OR j.kind = ANY(@kinds::text[]))
      AND (cardinality(@queues::text[]) = 0 OR j.queue = ANY(@queues::text[]))
      AND (@dedup_key::text = '' OR j.dedup_key = @dedup_key::text)
      -- Creation time, with the ID bounded by the ULID's time give or take skew_us, so that
      -- the primary key narrows the scan (created_at decides).
      AND (NOT @has_after::bool OR (j.created_at >= @after::timestamptz
           AND j.id >= venturi_ulid_floor(@after::timestamptz, @skew_us::bigint)))
      AND (NOT @has_before::bool OR (j.created_at < @before::timestamptz
           AND j.id < venturi_ulid_floor(@before::timestamptz, @minus_skew_us::bigint)))
      AND (@within_us::bigint = 0 OR (j.created_at > now() - interval '1 microsecond' * @within_us::bigint
           AND j.id >= venturi_ulid_floor(now(), @within_skew_us::bigint)))
)
SELECT j.id, j.kind, j.queue, j.state, j.priority, j.dedup_key, j.part, j.run_at, j.runs, j.failures,
       j.created_at, j.attempted_at, j.finished_at, j.lease_expires_at, j.worker_id,
       (j.stop_requested_at IS NOT NULL)::bool AS stop_requested,
       (CASE WHEN @summary::bool THEN COALESCE(j.journal->-1->>'event', '') ELSE '' END)::text AS last_event,
       (CASE WHEN @summary::bool THEN left(COALESCE(j.journal->-1->>'note', ''), 1024) ELSE '' END)::text AS last_note,
       p.hit::bool AS hit
FROM (
    -- Each branch: its window (x) of at most scan jobs, with the hits so far (hits) and the
    -- position (rn) of each; the hits up to max, or the window's last job when it ends
    -- short of max hits. The outer LIMIT stops the walk at the max-th hit. x's LIMIT keeps
    -- it a subquery, so that hit is computed once per job.
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.hit FROM m
              WHERE @order_by::text = 'id' AND (NOT @has_cursor::bool OR m.id < @c_id::uuid)
              ORDER BY m.id DESC
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.id DESC ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.run_at, m.hit FROM m
              WHERE @order_by::text = 'run_at' AND m.state = @state::venturi_job_state
                AND (NOT @has_cursor::bool OR (m.run_at, m.id) > (@c_ts::timestamptz, @c_id::uuid))
              ORDER BY m.run_at, m.id
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.run_at, x.id ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.lease_expires_at, m.hit FROM m
              WHERE @order_by::text = 'lease' AND m.state = 'running'
                AND (NOT @has_cursor::bool OR (m.lease_expires_at, m.id) > (@c_ts::timestamptz, @c_id::uuid))
              ORDER BY m.lease_expires_at, m.id
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.lease_expires_at, x.id ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.finished_at, m.hit FROM m
              WHERE @order_by::text = 'finished' AND m.state = @state::venturi_job_state
                AND (NOT @has_cursor::bool OR (m.finished_at, m.id) < (@c_ts::timestamptz, @c_id::uuid))
              ORDER BY m.finished_at DESC, m.id DESC
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.finished_at DESC, x.id DESC ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.priority, m.run_at, m.hit FROM m
              WHERE @order_by::text = 'plain' AND m.state = 'available' AND m.part IS NULL AND m.queue = @c_queue::text
                AND (@seg::int = 0
                     OR (@seg::int = 1 AND m.priority = @c_prio::smallint AND (m.run_at, m.id) > (@c_ts::timestamptz, @c_id::uuid))
                     OR (@seg::int = 2 AND m.priority < @c_prio::smallint))
              ORDER BY m.priority DESC, m.run_at, m.id
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.priority DESC, x.run_at, x.id ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.part, m.priority, m.run_at, m.hit FROM m
              WHERE @order_by::text = 'gated' AND m.state = 'available' AND m.part IS NOT NULL AND m.queue = @c_queue::text
                AND (@seg::int = 0
                     OR (@seg::int = 1 AND m.part = @c_part::text AND m.priority = @c_prio::smallint
                         AND (m.run_at, m.id) > (@c_ts::timestamptz, @c_id::uuid))
                     OR (@seg::int = 2 AND m.part = @c_part::text AND m.priority < @c_prio::smallint)
                     OR (@seg::int = 3 AND m.part > @c_part::text))
              ORDER BY m.part, m.priority DESC, m.run_at, m.id
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.part, x.priority DESC, x.run_at, x.id ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
) p
-- The page's rows by primary key, in the listing's snapshot.
JOIN venturi_job j ON j.id = p.id;

-- name: CountMatchingJobs :many
-- How many jobs match a filter, by state and whether they are a supervised singleton's (a
-- part that starts with singleton_prefix), counting at most max: a bulk action's dry run
-- in one statement. The filter is ListJobs' m, its hit column a predicate here
-- (TestCountMatchingJobsFilterIsListJobsFilter keeps the two alike).
SELECT c.state::text AS state, c.singleton::bool AS singleton, count(*)::bigint AS n
FROM (
    SELECT j.state, starts_with(COALESCE(j.part, ''), @singleton_prefix::text) AS singleton
    FROM venturi_job j
    -- The one state of a filter on one, as its type: the state's partial index applies.
    WHERE (sqlc.narg(one_state)::venturi_job_state IS NULL OR j.state = sqlc.narg(one_state)::venturi_job_state)
      AND (cardinality(@ids::uuid[]) = 0 OR j.id = ANY(@ids::uuid[]))
      AND (cardinality(@states::text[]) = 0 OR j.state = ANY((@states::text[])::venturi_job_state[]))
      AND (cardinality(@kinds::text[]) = 0 OR j.kind = ANY(@kinds::text[]))
      AND (cardinality(@queues::text[]) = 0 OR j.queue = ANY(@queues::text[]))
      AND (@dedup_key::text = '' OR j.dedup_key = @dedup_key::text)
      -- Creation time, with the ID bounded by the ULID's time give or take skew_us, so that
      -- the primary key narrows the scan (created_at decides).
      AND (NOT @has_after::bool OR (j.created_at >= @after::timestamptz
           AND j.id >= venturi_ulid_floor(@after::timestamptz, @skew_us::bigint)))
      AND (NOT @has_before::bool OR (j.created_at < @before::timestamptz
           AND j.id < venturi_ulid_floor(@before::timestamptz, @minus_skew_us::bigint)))
      AND (@within_us::bigint = 0 OR (j.created_at > now() - interval '1 microsecond' * @within_us::bigint
           AND j.id >= venturi_ulid_floor(now(), @within_skew_us::bigint)))
      AND
           ((@key_search::text = '' OR j.dedup_key IS NOT DISTINCT FROM @key_search::text)
            AND (@note_pattern::text = '' OR EXISTS (
                SELECT 1 FROM jsonb_array_elements(j.journal) AS e(x) WHERE e.x->>'note' ILIKE @note_pattern::text))
            AND (cardinality(@payload_paths::text[]) = 0 OR NOT EXISTS (
                SELECT 1 FROM (SELECT unnest(@payload_paths::text[]) AS p, unnest(@payload_values::text[]) AS v) pm
                WHERE venturi_json_text(j.payload, string_to_array(pm.p, chr(31))) IS DISTINCT FROM pm.v))
            AND (cardinality(@attachment_paths::text[]) = 0 OR NOT EXISTS (
                SELECT 1 FROM (SELECT unnest(@attachment_paths::text[]) AS p, unnest(@attachment_values::text[]) AS v) am
                WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(j.journal) AS e(x)
                                  WHERE venturi_json_text(e.x->'attachment', string_to_array(am.p, chr(31))) = am.v)))
           )
    LIMIT @max::int
) c
GROUP BY c.state, c.singleton;

-- name: NextAvailableQueue :one
-- The first queue after the given name that has available jobs (plain or gated), through
-- the claim indexes; '' when none.
SELECT COALESCE(LEAST(
    (SELECT j.queue FROM venturi_job j WHERE j.state = 'available' AND j.part IS NULL AND j.queue > @after::text
     ORDER BY j.queue LIMIT 1),
    (SELECT j.queue FROM venturi_job j WHERE j.state = 'available' AND j.part IS NOT NULL AND j.queue > @after::text
     ORDER BY j.queue LIMIT 1)), '')::text AS queue;

-- ---- Operations: audit and bulk actions (migration 13) -----------------------------------

-- name: AuditInsert :one
INSERT INTO venturi_audit (actor, action, target, count, reason)
VALUES (@actor::text, @action::text, @target::text, @count::bigint, @reason::text)
RETURNING id;

-- name: AuditAddCount :exec
-- A bulk action's entry counts the jobs of each batch in the batch's transaction.
UPDATE venturi_audit SET count = count + @n::bigint WHERE id = @id::bigint;

-- name: AuditLog :many
SELECT id, at, actor, action, target, count, reason
FROM venturi_audit
WHERE @before::bigint <= 0 OR id < @before::bigint
ORDER BY id DESC
LIMIT @max::int;

-- name: LockJobs :many
-- Locks the given jobs in ID order (the bulk cancel's first statement; CancelLocked follows).
SELECT id, state FROM venturi_job
WHERE id = ANY(ARRAY(SELECT unnest(@ids::uuid[])))
ORDER BY id
FOR UPDATE;

-- name: NotifyMany :exec
SELECT pg_notify(@channel::text, p.payload) FROM (SELECT unnest(@payloads::text[]) AS payload) p;

-- name: RetryJobs :one
-- Makes the given jobs available now, with their failures forgotten and a retried entry in
-- their journals, unless they left the states a retry applies to (dead, cancelled,
-- completed, scheduled) since they were listed: the row lock re-reads each one. A finished
-- job of a supervised singleton is left alone (its workers ensure its live job). The
-- finished ones are subtracted from the stats' finished counts in the same statement.
-- Returns how many changed and their kinds (to notify the workers).
WITH old AS (
    SELECT j.id, j.state, j.finished_at FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT unnest(@ids::uuid[])))
      AND j.state IN ('dead', 'cancelled', 'completed', 'scheduled')
      AND NOT (j.state <> 'scheduled' AND COALESCE(j.slot_key, '') LIKE 'venturi.singleton:%')
    ORDER BY j.id
    FOR UPDATE
), upd AS (
    UPDATE venturi_job j SET
        state = 'available', run_at = now(), failures = 0, finished_at = NULL,
        stop_requested_at = NULL, stop_event = NULL, stop_note = NULL, wait_signals = NULL,
        part = CASE WHEN j.part IS NULL AND EXISTS (SELECT 1 FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)
                    THEN '' ELSE j.part END,
        journal = j.journal || jsonb_build_array(jsonb_build_object('event', 'retried', 'note', @note::text, 'at', now()))
    FROM old
    WHERE j.id = old.id
    RETURNING j.id, j.kind, j.queue, old.state AS old_state, old.finished_at AS old_finished
)
SELECT count(*)::bigint AS changed,
       COALESCE(array_agg(DISTINCT u.kind), '{}')::text[] AS kinds,
       COALESCE(venturi_stats_forget(array_agg(u.queue), array_agg(u.kind), array_agg(u.old_state::text),
                                     array_agg(u.old_finished)), 0)::bigint AS forgotten
FROM upd u;

-- name: DeleteJobs :one
-- Deletes the given jobs unless they are running (re-read under the row lock), with their
-- journals, signals, hooks and steps (the delete triggers), and subtracts the finished ones
-- from the stats' finished counts. Returns how many it deleted.
WITH gone AS (
    DELETE FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT unnest(@ids::uuid[]))) AND j.state <> 'running'
    RETURNING j.queue, j.kind, j.state, j.finished_at
)
SELECT COALESCE(venturi_stats_forget(array_agg(g.queue), array_agg(g.kind), array_agg(g.state::text),
                                     array_agg(g.finished_at)), 0)::bigint AS deleted
FROM gone g;

-- name: ResetCircuit :one
-- Closes a breaker (its failures forgotten); the key is the one the kind's jobs of the
-- partition report to. Returns whether one was reset.
UPDATE venturi_gate g SET fails = 0, open_until = NULL, probe_until = NULL, updated_at = now()
FROM venturi_kind k
WHERE k.kind = @kind::text AND k.brk_failures > 0
  AND g.key = 'b' || chr(31) || k.kind || CASE WHEN k.brk_by_part THEN chr(31) || @part::text ELSE '' END
RETURNING g.key;

-- ---- Operations: one job, explain (migration 13) -----------------------------------------

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
       COALESCE((SELECT j.max_failures FROM venturi_job j WHERE j.id = @id), 0)::int AS max_failures,
       COALESCE((SELECT j.wait_signals FROM venturi_job j WHERE j.id = @id), '{}')::text[] AS wait_signals,
       (SELECT count(*) FROM venturi_signal s WHERE s.job_id = @id AND s.consumed_token IS NULL)::bigint AS pending_signals
FROM (SELECT 1) AS one
LEFT JOIN venturi_queue vq ON vq.name = @queue::text
LEFT JOIN venturi_kind k ON k.kind = @kind::text;

-- name: PendingDedupJob :one
-- The pending job an enqueue of the kind and key would meet (as DedupCandidate finds it).
SELECT id FROM venturi_job
WHERE kind = @kind AND dedup_key = @dedup_key::text AND state IN ('scheduled', 'available')
ORDER BY id DESC
LIMIT 1;
