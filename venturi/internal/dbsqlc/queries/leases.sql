-- name: ExtendLeases :many
-- Extends the leases of one worker's running jobs in one statement, and reports which of
-- them were asked to stop (stop_event: replaced, cancelled). It returns a row for every
-- run whose job still holds its token: extended, or not extended because another
-- transaction holds the job's row (a handler's transaction between Run.CompleteTx and its
-- COMMIT, a cancel request being written). A run with no row was fenced: its token no
-- longer matches.
--
-- It waits for no lock: held rows are skipped (SKIP LOCKED), so that one held row cannot
-- stall the extension of the worker's other runs past their leases (the statement has half
-- a lease: a handler's transaction left idle after CompleteTx made every run of its worker
-- lose its lease). The worker then extends the held ones alone, waiting for them
-- (ExtendHeldLeases). Nor does it wait for a run's open StepTx: SaveStep holds only a
-- key-share lock, which a no-key update does not conflict with.
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token
), held AS (
    -- A matching token implies state = 'running' (CHECK venturi_job_running_has_lease).
    SELECT j.id, j.stop_event FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT u.id FROM u))
      AND (j.id, j.lease_token) IN (SELECT u.id, u.token FROM u)
), locked AS (
    SELECT j.id FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT held.id FROM held))
      AND (j.id, j.lease_token) IN (SELECT u.id, u.token FROM u)
    FOR NO KEY UPDATE OF j SKIP LOCKED
), extended AS (
    UPDATE venturi_job j SET lease_expires_at = now() + interval '1 microsecond' * @lease_us::bigint
    WHERE j.id = ANY(ARRAY(SELECT locked.id FROM locked))
    RETURNING j.id, j.stop_event
)
SELECT e.id, true AS extended, COALESCE(e.stop_event, '')::text AS stop_event FROM extended e
UNION ALL
SELECT h.id, false AS extended, COALESCE(h.stop_event, '')::text AS stop_event FROM held h
WHERE h.id <> ALL(ARRAY(SELECT e.id FROM extended e));

-- name: ExtendHeldLeases :many
-- ExtendLeases for the runs whose rows it found held by another transaction: it waits for
-- them (within what is left of the extension's half lease), so that a run whose row is
-- held often but briefly keeps its lease. Only those few rows can hold it up.
--
-- The rows are locked in ID order before they are updated, whatever plan finds them (by
-- primary key: ANY of a subquery's array, not a join the planner may run as a table scan;
-- the LockRows above the sort takes them in order): an UPDATE ... FROM unnest(ids) locked
-- them in its plan's order, and deadlocked with the worker's ReleaseUnstarted, which
-- locks in ID order (chaos/README.md, "Bugs found").
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
    -- A gated job due again keeps its place (venturi_job_place gives one to a job gated
    -- only now).
    vt = CASE WHEN j.stop_event IS NULL AND NOT (j.max_failures > 0 AND j.failures + 1 >= j.max_failures AND NOT expired.singleton)
              THEN COALESCE(j.vt, venturi_job_place(j.queue, COALESCE(j.part,
                       (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)), j.priority))
              ELSE j.vt END,
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
