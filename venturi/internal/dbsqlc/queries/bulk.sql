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
