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
-- The lock of lease rescue and promotion (internal/maintenance, runner.go): one worker at a time does them.
-- Nothing that waits for the stats or for retention holds it.
SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_maintenance', 0))::bool AS locked;

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
