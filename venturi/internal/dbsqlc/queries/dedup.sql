-- name: DedupLock :one
-- Serializes enqueues of one (kind, dedup_key) until the enclosing transaction ends, and
-- reports the isolation level: the candidate lookup that follows must take a fresh
-- snapshot, which only READ COMMITTED gives.
SELECT current_setting('transaction_isolation')::text AS isolation
FROM pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || @kind::text || '/' || @dedup_key::text, 0));

-- name: InsertIfNoCandidate :one
-- The common dedup case in one statement: insert unless a pending job has the key, or
-- enqueues from SQL of the key wait for a Go merge (deferred: the caller applies them
-- first, see TakeDeferredMerges).
WITH cand AS (
    SELECT j.id FROM venturi_job j
    WHERE j.kind = @kind AND j.dedup_key = @dedup_key::text AND j.state IN ('scheduled', 'available')
    LIMIT 1
), def AS (
    SELECT EXISTS (SELECT 1 FROM venturi_deferred_merge d WHERE d.kind = @kind AND d.dedup_key = @dedup_key::text) AS deferred
), ins AS (
    INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta)
    SELECT @id, @kind, @queue::text, CASE WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
           @priority, @dedup_key::text, (@payload::text)::jsonb, t.at,
           COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = @kind AND vk.limited)),
           sqlc.narg(slot_key)::text, sqlc.narg(slot_limit)::int, sqlc.narg(slot_policy)::smallint,
           sqlc.arg(events)::bool, sqlc.narg(meta)::jsonb
    FROM (SELECT COALESCE(sqlc.narg(at)::timestamptz, now()) + interval '1 microsecond' * @delay_us::bigint AS at) t
    WHERE NOT EXISTS (SELECT 1 FROM cand) AND NOT (SELECT deferred FROM def)
      -- Only READ COMMITTED gives this statement a snapshot taken after the key's lock.
      AND current_setting('transaction_isolation') = 'read committed'
    RETURNING venturi_job.state
)
SELECT EXISTS (SELECT 1 FROM ins)::bool AS inserted,
       COALESCE((SELECT state = 'available' FROM ins), false)::bool AS due,
       (SELECT deferred FROM def)::bool AS deferred;

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
    -- A gated job that becomes due, or that Replace or With moves to another queue,
    -- partition or priority, takes its place behind its partition's pending jobs; one that
    -- stays where it was keeps its place. (A job due later is placed when it comes due.)
    vt       = CASE
        WHEN t.at > now() THEN j.vt
        WHEN j.state = 'available' AND j.vt IS NOT NULL
             AND NOT (@replace::bool AND (@queue::text <> j.queue OR @priority::smallint <> j.priority
                      OR COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited))
                         IS DISTINCT FROM j.part))
        THEN j.vt
        ELSE venturi_job_place(CASE WHEN @replace::bool THEN @queue::text ELSE j.queue END,
                               CASE WHEN @replace::bool
                                    THEN COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited))
                                    ELSE j.part END,
                               CASE WHEN @replace::bool THEN @priority::smallint ELSE j.priority END) END,
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

-- name: InsertOrReplace :one
-- The dedup enqueue of a task type without a merge method (its decision is always
-- Replace), in one statement: replace the newest pending job with the key, or insert.
-- Runs after DedupLock in the same transaction. Returns NULL id unless READ COMMITTED, and
-- when enqueues from SQL of the key wait for a Go merge (the general path applies them).
WITH t AS (
    SELECT COALESCE(sqlc.narg(at)::timestamptz, now()) + interval '1 microsecond' * @delay_us::bigint AS at
), def AS (
    SELECT EXISTS (SELECT 1 FROM venturi_deferred_merge d WHERE d.kind = @kind AND d.dedup_key = @dedup_key::text) AS deferred
), cand AS (
    SELECT j.id FROM venturi_job j
    WHERE j.kind = @kind AND j.dedup_key = @dedup_key::text AND j.state IN ('scheduled', 'available')
      AND current_setting('transaction_isolation') = 'read committed' AND NOT (SELECT deferred FROM def)
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
        -- As MergeInto places a replaced job.
        vt       = CASE
            WHEN LEAST(j.run_at, t.at) > now() THEN j.vt
            WHEN j.state = 'available' AND j.vt IS NOT NULL AND @queue::text = j.queue AND @priority::smallint = j.priority
                 AND COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited))
                     IS NOT DISTINCT FROM j.part
            THEN j.vt
            ELSE venturi_job_place(@queue::text,
                                   COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)),
                                   @priority::smallint) END,
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
    WHERE NOT EXISTS (SELECT 1 FROM cand) AND NOT (SELECT deferred FROM def)
      AND current_setting('transaction_isolation') = 'read committed'
    RETURNING venturi_job.id, venturi_job.state
)
SELECT COALESCE((SELECT id FROM upd), (SELECT id FROM ins))::uuid AS job_id,
       EXISTS (SELECT 1 FROM upd)::bool AS replaced,
       COALESCE((SELECT state = 'available' FROM upd), (SELECT state = 'available' FROM ins), false)::bool AS due;

-- name: PendingDedupJob :one
-- The pending job an enqueue of the kind and key would meet (as DedupCandidate finds it).
SELECT id FROM venturi_job
WHERE kind = @kind AND dedup_key = @dedup_key::text AND state IN ('scheduled', 'available')
ORDER BY id DESC
LIMIT 1;

-- name: TakeDeferredMerges :many
-- Takes the enqueues from SQL of one (kind, key) that wait for a Go merge
-- (schema/functions/venturi_enqueue_one.sql defers them), oldest first. The caller holds the key's lock (DedupLock) and
-- applies them in its transaction, through the Go merge of the kind's type.
WITH d AS (
    DELETE FROM venturi_deferred_merge
    WHERE kind = @kind::text AND dedup_key = @dedup_key::text
    RETURNING seq, id, kind, dedup_key, queue, priority, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta
)
SELECT d.seq, d.id, d.kind, d.dedup_key, d.queue, d.priority, d.payload, d.run_at, d.part, d.slot_key, d.slot_limit,
       d.slot_policy, d.events, d.meta
FROM d
ORDER BY d.seq;

-- name: DeferredMergeKeys :many
-- The (kind, key)s of the given kinds with enqueues from SQL that wait for a Go merge,
-- the longest waiting first.
SELECT kind, dedup_key
FROM venturi_deferred_merge
WHERE kind = ANY(@kinds::text[])
GROUP BY kind, dedup_key
ORDER BY min(seq)
LIMIT @max::int;

-- name: MergeChannel :one
-- The channel on which an enqueue from SQL that waits for a Go merge wakes the workers
-- (schema/functions/venturi_merge_channel.sql).
SELECT venturi_merge_channel()::text AS channel;

-- name: InsertDeadJob :exec
-- A deferred enqueue whose payload does not decode into its kind's type: it could never
-- merge nor run, so it is written as a job that ended dead at once, with the decode error
-- as its journal's note (a run of it would end the same way), not as a pending job that
-- every later merge of its key would meet.
INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, finished_at, events, meta, journal)
VALUES (@id, @kind::text, @queue::text, 'dead', @priority, @dedup_key::text, (@payload::text)::jsonb, now(), now(),
        @events::bool, sqlc.narg(meta)::jsonb,
        jsonb_build_array(jsonb_build_object('event', 'dead', 'note', @note::text, 'at', now())));
