-- name: CancelLocked :one
-- Cancels jobs that the transaction has locked (LockJobForSignal, LockJobs), so that this
-- statement's snapshot sees them as locked: a pending or waiting job ends cancelled at
-- once (a workflow's blocked job too); a running one is asked to stop (its run's end makes it cancelled, see FinishRuns);
-- a finished one is left as it is. Reports how many ended and which were asked to stop.
WITH ended AS (
    UPDATE venturi_job x SET
        state = 'cancelled', finished_at = now(),
        journal = x.journal || jsonb_build_array(jsonb_build_object('event', 'cancelled', 'note', @note::text, 'at', now()))
    -- An array the planner cannot size: it then finds the rows by primary key.
    WHERE x.id = ANY(ARRAY(SELECT unnest(@ids::uuid[]))) AND x.state IN ('blocked', 'scheduled', 'available', 'waiting')
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

-- name: LockJobs :many
-- Locks the given jobs in ID order (the bulk cancel's first statement; CancelLocked follows).
SELECT id, state FROM venturi_job
WHERE id = ANY(ARRAY(SELECT unnest(@ids::uuid[])))
ORDER BY id
FOR UPDATE;
