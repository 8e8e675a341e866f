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
-- job moves back from the history into venturi_job (its retried event is written by
-- venturi_event_write as it is inserted). A finished job of a supervised singleton is left
-- alone (its workers ensure its live job). The finished ones are subtracted from the stats'
-- finished counts in the same statement. Returns how many changed, which, and their kinds
-- (to notify the workers). A job that moved between the tables while this statement ran
-- (the retention duty's sweep) is in neither as this statement sees them: the caller runs
-- it again for the jobs it did not change.
-- A workflow's job goes back blocked instead, and its workflow's settle decides when it
-- runs again (venturi_workflow_update and venturi_workflow_insert record the change).
WITH old AS (
    -- part: the job's partition once available again (a plain job of a kind that has limits
    -- now goes back as a gated one).
    SELECT j.id, j.state, j.finished_at,
           COALESCE(j.part, (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)) AS part,
           -- A workflow's job goes back blocked: its workflow decides when it runs.
           EXISTS (SELECT 1 FROM venturi_workflow w WHERE w.id = j.workflow_id) AS member
    FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT unnest(@ids::uuid[])))
      AND j.state IN ('dead', 'cancelled', 'completed', 'scheduled')
      AND NOT (j.state <> 'scheduled' AND COALESCE(j.slot_key, '') LIKE 'venturi.singleton:%')
    ORDER BY j.id
    FOR UPDATE
), upd AS (
    UPDATE venturi_job j SET
        state = (CASE WHEN old.member THEN 'blocked' ELSE 'available' END)::venturi_job_state,
        run_at = now(), failures = 0, finished_at = NULL,
        stop_requested_at = NULL, stop_event = NULL, stop_note = NULL, wait_signals = NULL,
        -- A gated job takes its place behind its partition's pending jobs (a blocked one
        -- when it is released).
        part = old.part, vt = CASE WHEN NOT old.member THEN venturi_job_place(j.queue, old.part, j.priority) END,
        journal = j.journal || jsonb_build_array(jsonb_build_object('event', 'retried', 'note', @note::text, 'at', now()))
    FROM old
    WHERE j.id = old.id
    RETURNING j.id, j.kind, j.queue, old.state AS old_state, old.finished_at AS old_finished
), back AS (
    DELETE FROM venturi_job_history h
    WHERE h.id = ANY(ARRAY(SELECT unnest(@ids::uuid[])))
      AND NOT COALESCE(h.slot_key, '') LIKE 'venturi.singleton:%'
    RETURNING h.*
), ins AS (
    INSERT INTO venturi_job (id, kind, state, priority, dedup_key, payload, carry, run_at, runs, failures,
        max_failures, worker_id, attempted_at, journal, created_at, journal_moved, journal_dropped, queue, part,
        slot_key, slot_limit, slot_policy, breaker, events, meta, workflow_id)
    SELECT b.id, b.kind,
           (CASE WHEN EXISTS (SELECT 1 FROM venturi_workflow w WHERE w.id = b.workflow_id) THEN 'blocked' ELSE 'available' END)::venturi_job_state,
           b.priority, b.dedup_key, b.payload, b.carry, now(), b.runs, 0,
           b.max_failures, b.worker_id, b.attempted_at,
           -- A derived entry (a plain completion's) is written out as venturi_job_all reads it.
           CASE WHEN b.derived_token IS NULL THEN b.journal
                ELSE b.journal || jsonb_build_array(venturi_completed_entry(b.runs, b.derived_token, b.worker_id,
                                                                            b.attempted_at, b.derived_run_us)) END
               || jsonb_build_array(jsonb_build_object('event', 'retried', 'note', @note::text, 'at', now())),
           b.created_at, b.journal_moved, b.journal_dropped, b.queue,
           CASE WHEN b.part IS NULL AND EXISTS (SELECT 1 FROM venturi_kind vk WHERE vk.kind = b.kind AND vk.limited)
                THEN '' ELSE b.part END,
           b.slot_key, b.slot_limit, b.slot_policy, b.breaker, b.events, b.meta, b.workflow_id
    FROM back b
    RETURNING id
), changed AS (
    SELECT u.id, u.kind, u.queue, u.old_state::text AS old_state, u.old_finished FROM upd u
    UNION ALL
    SELECT b.id, b.kind, b.queue, b.state::text, b.finished_at FROM back b
)
SELECT count(*)::bigint AS changed,
       COALESCE(array_agg(c.id), '{}')::uuid[] AS ids,
       COALESCE(array_agg(DISTINCT c.kind), '{}')::text[] AS kinds,
       COALESCE(venturi_stats_forget(array_agg(c.queue), array_agg(c.kind), array_agg(c.old_state),
                                     array_agg(c.old_finished)), 0)::bigint AS forgotten,
       (SELECT count(*) FROM ins)::bigint AS moved_back
FROM changed c;

-- name: DeleteJobs :one
-- Deletes the given jobs unless they are running (re-read under the row lock), pending or
-- finished, with their moved journal entries, signals, hooks and steps, and subtracts the
-- finished ones from the stats' finished counts. Returns how many it deleted, and which
-- (a job that moved between the tables meanwhile is missed, as RetryJobs says).
WITH gone AS (
    DELETE FROM venturi_job j
    WHERE j.id = ANY(ARRAY(SELECT unnest(@ids::uuid[]))) AND j.state <> 'running'
    RETURNING j.id, j.queue, j.kind, j.state, j.finished_at
), gone_finished AS (
    DELETE FROM venturi_job_history h
    WHERE h.id = ANY(ARRAY(SELECT unnest(@ids::uuid[])))
    RETURNING h.id, h.queue, h.kind, h.state, h.finished_at
), g AS (
    SELECT * FROM gone UNION ALL SELECT * FROM gone_finished
), journal AS (
    DELETE FROM venturi_journal x WHERE x.job_id = ANY(ARRAY(SELECT g.id FROM g))
), signals AS (
    DELETE FROM venturi_signal x WHERE x.job_id = ANY(ARRAY(SELECT g.id FROM g))
), hooks AS (
    DELETE FROM venturi_hook x WHERE x.job_id = ANY(ARRAY(SELECT g.id FROM g))
), steps AS (
    DELETE FROM venturi_step x WHERE x.job_id = ANY(ARRAY(SELECT g.id FROM g))
)
SELECT COALESCE(venturi_stats_forget(array_agg(g.queue), array_agg(g.kind), array_agg(g.state::text),
                                     array_agg(g.finished_at)), 0)::bigint AS deleted,
       COALESCE(array_agg(g.id), '{}')::uuid[] AS ids
FROM g;
