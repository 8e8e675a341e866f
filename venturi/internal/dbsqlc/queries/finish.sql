-- name: FinishRuns :many
-- Ends runs: one row per run, each fenced by its token. Rows whose token no longer
-- matches are not returned; their run was lost and its result is discarded. Each entry
-- is a one-element JSON array, built by the worker from the run's claim time (database
-- clock) plus its measured duration (ran_us), or '' for a plain completion (no note, no
-- attachment): its entry is derived from the row's columns, the token and ran_us
-- (venturi_completed_entry). A job that moves keeps the two numbers in its history row
-- (derived_token, derived_run_us) and venturi_job_all appends the entry; one that stays
-- gets the entry appended.
--
-- A run that ends its job (completed, dead, cancelled) moves the job out of venturi_job:
-- the row is deleted and its final record, journal included, is inserted into
-- venturi_job_history, in its state's lane (1: completed and cancelled, 2: dead), with its
-- prune time (now plus the retention of its state: retain_completed_us for completed and
-- cancelled jobs, retain_dead_us for dead ones, clamped below the end of the lane's newest
-- partition). A negative retention keeps nothing: the row is only deleted. The job's
-- awaiters are notified and, when it records events, its final event is written, as
-- venturi_job's update triggers do for the runs that stay.
--
-- The other runs (retried, paused, waiting) update the row in place, as do those that end
-- their job while its lane has no partition yet (a schema no worker has started on: the
-- retention duty's sweep moves them later). A run that was asked to stop (stop_event:
-- replaced or cancelled) and reports anything short of completing ends its job
-- cancelled, whether or not its worker heard of the request: its entry's event becomes
-- the request's and its note starts with the reason. (Such a job stays in venturi_job
-- until the sweep moves it.)
--
-- The rows are found by the primary key (ANY of a subquery's array): a join alone was
-- planned, with some 50 to 100 runs on a small table, as a table scan. The plan is usually
-- a bitmap scan, which locks the rows in heap order, not ID order: no other statement may
-- wait for these rows while holding one of them. The worker's lease extension therefore
-- leaves out the runs whose results are being written; the rescue skips locked rows.
WITH r AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token, unnest(@states::text[]) AS state, unnest(@delays_us::bigint[]) AS delay_us, unnest(@failed::bool[]) AS failed, unnest(@set_carry::bool[]) AS set_carry, unnest(@carries::text[]) AS carry, unnest(@entries::text[]) AS entry, unnest(@ran_us::bigint[]) AS derived_run_us
), lanes AS (
    -- Where each lane's newest partition ends (NULL: the lane has none).
    -- (Two index probes, venturi_history_partition_lane_idx: under SetLocalIndexScans a
    -- scan of the table would cost the plan enough for JIT compilation, ~0.5 s a plan.)
    SELECT (SELECT max(p.hi) FROM venturi_history_partition p WHERE p.lane = 1) AS completed_hi,
           (SELECT max(p.hi) FROM venturi_history_partition p WHERE p.lane = 2) AS dead_hi
), u AS (
    -- moves: the run ends its job, which leaves venturi_job (kept in its lane, or deleted).
    SELECT r.id, r.token, r.state, r.delay_us, r.failed, r.set_carry, r.carry, r.entry, r.derived_run_us,
           r.state IN ('completed', 'dead', 'cancelled')
               AND (CASE WHEN r.state = 'dead' THEN @retain_dead_us::bigint ELSE @retain_completed_us::bigint END < 0
                    OR CASE WHEN r.state = 'dead' THEN l.dead_hi ELSE l.completed_hi END IS NOT NULL) AS moves
    FROM r CROSS JOIN lanes l
), ended AS (
    -- A matching token implies state = 'running' (CHECK venturi_job_running_has_lease).
    DELETE FROM venturi_job j USING u
    WHERE j.id = ANY(ARRAY(SELECT u.id FROM u WHERE u.moves))
      AND j.id = u.id AND j.lease_token = u.token
    RETURNING j.id, j.kind, u.state::venturi_job_state AS state, j.priority, j.dedup_key, j.payload,
              CASE WHEN u.set_carry THEN NULLIF(u.carry, '')::jsonb ELSE j.carry END AS carry,
              j.run_at, j.runs, j.failures + u.failed::int AS failures, j.max_failures, j.worker_id,
              j.attempted_at, j.journal, j.created_at, j.journal_moved, j.journal_dropped, j.queue, j.part,
              j.slot_key, j.slot_limit, j.slot_policy, j.breaker, j.stop_requested_at, j.stop_event,
              j.stop_note, j.events, j.meta, j.await_channel, j.workflow_id,
              -- j is the row as locked: a stop request that committed while this statement
              -- ran is seen. NULL: a plain completion's entry, derived.
              CASE WHEN u.entry = '' THEN NULL
                   WHEN j.stop_event IS NOT NULL AND u.state = 'cancelled'
                   THEN jsonb_set(u.entry::jsonb, '{0,note}',
                                  to_jsonb(j.stop_note || COALESCE(': ' || NULLIF(u.entry::jsonb->0->>'note', ''), '')))
                   ELSE u.entry::jsonb END AS entry,
              j.lease_token AS run_token
), kept AS (
    INSERT INTO venturi_job_history (id, kind, state, priority, dedup_key, payload, carry, run_at, runs, failures,
        max_failures, worker_id, attempted_at, journal, created_at, finished_at, journal_moved, journal_dropped,
        queue, part, slot_key, slot_limit, slot_policy, breaker, stop_requested_at, stop_event, stop_note,
        events, meta, derived_token, derived_run_us, prune_at, workflow_id)
    SELECT e.id, e.kind, e.state, e.priority, e.dedup_key, e.payload, e.carry, e.run_at, e.runs, e.failures,
           e.max_failures, e.worker_id, e.attempted_at, COALESCE(e.journal || e.entry, e.journal), e.created_at, now(),
           e.journal_moved, e.journal_dropped, e.queue, e.part, e.slot_key, e.slot_limit, e.slot_policy, e.breaker,
           e.stop_requested_at, e.stop_event, e.stop_note, e.events, e.meta,
           CASE WHEN e.entry IS NULL THEN e.run_token END, CASE WHEN e.entry IS NULL THEN u.derived_run_us END,
           LEAST(now() + interval '1 microsecond' * (CASE WHEN e.state = 'dead' THEN @retain_dead_us::bigint ELSE @retain_completed_us::bigint END),
                 (CASE WHEN e.state = 'dead' THEN l.dead_hi ELSE l.completed_hi END) - interval '1 microsecond'),
           e.workflow_id
    FROM ended e JOIN u ON u.id = e.id CROSS JOIN lanes l
    WHERE (CASE WHEN e.state = 'dead' THEN @retain_dead_us::bigint ELSE @retain_completed_us::bigint END) >= 0
    RETURNING id
), discarded_members AS (
    -- A workflow's job kept for no time is recorded for its workflow here (one kept is
    -- below, or by venturi_workflow_delete from its history row).
    INSERT INTO venturi_workflow_inbox (workflow_id, job_id, to_state)
    SELECT e.workflow_id, e.id, e.state FROM ended e
    WHERE e.workflow_id IS NOT NULL
      AND (CASE WHEN e.state = 'dead' THEN @retain_dead_us::bigint ELSE @retain_completed_us::bigint END) < 0
    RETURNING workflow_id
), kept_members AS (
    -- The workflow's jobs kept in the history, when the finish's transaction says this
    -- statement records them (SetLocalFinish: venturi.finish_inbox): one insert, where
    -- venturi_workflow_delete ran per row (an executor, a read of the history row, a
    -- single-row insert). Without the setting, the trigger records them.
    INSERT INTO venturi_workflow_inbox (workflow_id, job_id, to_state)
    SELECT e.workflow_id, e.id, e.state FROM ended e
    WHERE e.workflow_id IS NOT NULL
      AND (CASE WHEN e.state = 'dead' THEN @retain_dead_us::bigint ELSE @retain_completed_us::bigint END) >= 0
      AND current_setting('venturi.finish_inbox', true) IS NOT DISTINCT FROM 'on'
    RETURNING 1
), evented AS (
    -- The final entry as venturi_event_write records an appended one.
    INSERT INTO venturi_event (job_id, kind, queue, event, run, state, note, worker, started_at, run_at, delay_us, meta)
    -- (A derived entry, NULL here, is a completion by the job's worker at its attempt.)
    SELECT e.id, e.kind, e.queue, COALESCE(e.entry->0->>'event', CASE WHEN e.entry IS NULL THEN 'completed' END, '?'),
           COALESCE((e.entry->0->>'run')::int, e.runs), e.state::text, left(e.entry->0->>'note', 1024),
           COALESCE(e.entry->0->>'worker', e.worker_id), COALESCE((e.entry->0->>'started_at')::timestamptz, e.attempted_at),
           e.run_at, ((e.entry->0->>'resume_in')::bigint / 1000), e.meta
    FROM ended e
    WHERE e.events
    RETURNING 1
), notified AS (
    SELECT count(pg_notify(e.await_channel, chr(31) || 'done:' || e.id::text)) AS n
    FROM ended e WHERE e.await_channel IS NOT NULL
    UNION ALL
    SELECT count(pg_notify(venturi_events_channel(), '')) FROM (SELECT 1 FROM evented LIMIT 1) w
    UNION ALL
    SELECT count(pg_notify(venturi_workflow_channel(), '')) FROM (SELECT 1 FROM discarded_members LIMIT 1) d
    WHERE current_setting('venturi.workflow_settle', true) IS DISTINCT FROM 'on'
), updated AS (
    UPDATE venturi_job j SET
        -- j is the row as locked: a stop request that committed while this statement ran is seen.
        state            = (CASE WHEN j.stop_event IS NOT NULL AND u.state IN ('available', 'scheduled', 'waiting')
                                 THEN 'cancelled' ELSE u.state END)::venturi_job_state,
        -- A waiting job's run_at is its wait's timeout.
        run_at           = CASE WHEN u.state IN ('available', 'scheduled', 'waiting') AND j.stop_event IS NULL
                                THEN now() + u.delay_us * interval '1 microsecond' ELSE j.run_at END,
        -- A run asked to stop ends as the request said, not as a failure.
        failures         = j.failures + (u.failed AND NOT (j.stop_event IS NOT NULL AND u.state IN ('available', 'scheduled', 'waiting')))::int,
        carry            = CASE WHEN u.set_carry THEN NULLIF(u.carry, '')::jsonb ELSE j.carry END,
        -- A plain job of a kind that has limits now goes back as a gated one.
        part             = CASE WHEN j.part IS NULL AND u.state IN ('available', 'scheduled', 'waiting')
                                     AND EXISTS (SELECT 1 FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)
                                THEN '' ELSE j.part END,
        -- A gated job due at once again keeps its place (venturi_job_place gives one to a
        -- job gated only now); one due later takes its place when it comes due.
        vt               = CASE WHEN u.state = 'available' AND j.stop_event IS NULL
                                THEN COALESCE(j.vt, venturi_job_place(j.queue, COALESCE(j.part,
                                         (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)), j.priority))
                                ELSE j.vt END,
        lease_token      = NULL,
        lease_expires_at = NULL,
        finished_at      = CASE WHEN u.state IN ('completed', 'dead', 'cancelled') OR j.stop_event IS NOT NULL
                                THEN now() END,
        journal          = j.journal || CASE
            WHEN u.entry = '' THEN jsonb_build_array(venturi_completed_entry(j.runs, u.token, j.worker_id,
                                                                              j.attempted_at, u.derived_run_us))
            WHEN j.stop_event IS NULL THEN u.entry::jsonb
            WHEN u.state = 'cancelled' THEN jsonb_set(u.entry::jsonb, '{0,note}',
                to_jsonb(j.stop_note || COALESCE(': ' || NULLIF(u.entry::jsonb->0->>'note', ''), '')))
            -- The worker did not hear of the request: its entry for the run becomes the
            -- request's (one entry per run), its note kept after the reason.
            WHEN u.state IN ('available', 'scheduled', 'waiting') THEN jsonb_set(jsonb_set(u.entry::jsonb, '{0,event}', to_jsonb(j.stop_event)),
                '{0,note}', to_jsonb(j.stop_note || COALESCE(': ' || NULLIF(u.entry::jsonb->0->>'note', ''), '')))
            ELSE u.entry::jsonb END
    FROM u
    -- The runs that do not end their job, and, while its lane has no partition yet, those
    -- that do (the retention duty's sweep moves them once it has).
    WHERE j.id = ANY(ARRAY(SELECT u.id FROM u WHERE NOT u.moves))
      AND j.id = u.id AND j.lease_token = u.token
    RETURNING j.id
)
-- The awaiters', the event stream's and the workflow resolvers' notifications are sent
-- once the first ended job is read (an uncorrelated subquery, evaluated once; nothing ended, nothing to notify).
SELECT e.id FROM ended e WHERE (SELECT sum(x.n) FROM notified x) >= 0
UNION ALL
SELECT d.id FROM updated d;

-- name: ReleaseUnstarted :many
-- Returns claimed jobs whose handler never started (shutdown) without recording a run. A
-- job that was asked to stop meanwhile (replaced, cancelled) ends cancelled instead. The
-- rows are locked in ID order first, as ExtendLeases locks them (see there).
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
UPDATE venturi_job j SET
    state = (CASE WHEN j.stop_event IS NULL THEN 'available' ELSE 'cancelled' END)::venturi_job_state,
    finished_at = CASE WHEN j.stop_event IS NOT NULL THEN now() END,
    journal = CASE WHEN j.stop_event IS NULL THEN j.journal
                   ELSE j.journal || jsonb_build_array(jsonb_build_object('event', j.stop_event, 'note', j.stop_note, 'at', now())) END,
    part = CASE WHEN j.part IS NULL AND EXISTS (SELECT 1 FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)
                THEN '' ELSE j.part END,
    -- A gated job keeps its place (venturi_job_place gives one to a job gated only now).
    vt = CASE WHEN j.stop_event IS NULL
              THEN COALESCE(j.vt, venturi_job_place(j.queue, COALESCE(j.part,
                       (SELECT '' FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)), j.priority))
              ELSE j.vt END,
    runs = j.runs - 1, lease_token = NULL, lease_expires_at = NULL
WHERE j.id = ANY(ARRAY(SELECT locked.id FROM locked))
RETURNING j.id;
