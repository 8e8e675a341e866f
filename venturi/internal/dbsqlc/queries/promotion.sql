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
