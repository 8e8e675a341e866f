-- name: ArmWaits :many
-- Sets what the just-finished runs' jobs (now waiting, locked by this transaction) wait
-- for; a job for which a matching signal already arrived is available again at once.
-- Signals sent from now on wait for this transaction's row locks and see the waits.
UPDATE venturi_job j SET
    wait_signals = string_to_array(u.names, chr(31)),
    state = (CASE WHEN w.ready THEN 'available' ELSE 'waiting' END)::venturi_job_state,
    run_at = CASE WHEN w.ready THEN now() ELSE j.run_at END,
    -- A gated job woken takes its place behind its partition's pending jobs.
    vt = CASE WHEN w.ready THEN venturi_job_place(j.queue, j.part, j.priority) ELSE j.vt END
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

-- name: FinishedJobState :one
-- The state of a job in the history of finished jobs (no row: it is not there).
SELECT h.state FROM venturi_job_history h WHERE h.id = @id;

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
    UPDATE venturi_job j SET state = 'available', run_at = now(), vt = venturi_job_place(j.queue, j.part, j.priority)
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
