-- name: PromoteDue :execrows
-- Moves scheduled jobs that came due, and waiting jobs whose wait timed out, to available.
-- Idempotent; any worker may run it. A gated job takes its place behind its partition's
-- pending jobs (venturi_job_place: STRICT, so a plain job's NULL partition gives it none).
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
UPDATE venturi_job SET state = 'available', vt = venturi_job_place(queue, part, priority)
WHERE id = ANY(ARRAY(SELECT due.id FROM due UNION ALL SELECT timed_out.id FROM timed_out));

-- name: PlaceUnplaced :execrows
-- Gives their places to the available gated jobs that have none, oldest first: an older
-- worker made them available by an update that set none (migration 23's header says
-- when). Reads venturi_job_unplaced_idx, which holds only those; run once a minute.
UPDATE venturi_job j SET vt = venturi_job_place(j.queue, j.part, j.priority)
WHERE j.id = ANY(ARRAY(
    SELECT x.id FROM venturi_job x
    WHERE x.state = 'available' AND x.part IS NOT NULL AND x.vt IS NULL
    ORDER BY x.id
    LIMIT @max::int
    FOR UPDATE SKIP LOCKED));
