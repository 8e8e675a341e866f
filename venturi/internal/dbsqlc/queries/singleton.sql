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
