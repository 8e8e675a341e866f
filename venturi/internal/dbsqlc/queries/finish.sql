-- name: FinishRuns :many
-- Ends runs: one row per run, each fenced by its token. Rows whose token no longer
-- matches are not returned; their run was lost and its result is discarded. Each entry
-- is a one-element JSON array, built by the worker from the run's claim time (database
-- clock) plus its measured duration.
--
-- A run that was asked to stop (stop_event: replaced or cancelled) and reports anything
-- short of completing ends its job cancelled, whether or not its worker heard of the
-- request: its entry's event becomes the request's and its note starts with the reason.
--
-- The rows are found by the primary key (ANY of a subquery's array): a join alone was
-- planned, with some 50 to 100 runs on a small table, as a table scan. The plan is usually
-- a bitmap scan, which locks the rows in heap order, not ID order: no other statement may
-- wait for these rows while holding one of them. The worker's lease extension (ExtendLeases,
-- ID order) therefore leaves out the runs whose results are being written (it deadlocked
-- with this statement before); the rescue skips locked rows. Locking first in a CTE, as
-- ExtendLeases does, would cost a run a third more buffers and a WAL record on this hot
-- path.
WITH u AS (
    SELECT unnest(@ids::uuid[]) AS id, unnest(@tokens::bigint[]) AS token, unnest(@states::text[]) AS state, unnest(@delays_us::bigint[]) AS delay_us, unnest(@failed::bool[]) AS failed, unnest(@set_carry::bool[]) AS set_carry, unnest(@carries::text[]) AS carry, unnest(@entries::text[]) AS entry
)
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
    lease_token      = NULL,
    lease_expires_at = NULL,
    finished_at      = CASE WHEN u.state IN ('completed', 'dead', 'cancelled') OR j.stop_event IS NOT NULL
                            THEN now() END,
    journal          = j.journal || CASE
        WHEN j.stop_event IS NULL THEN u.entry::jsonb
        WHEN u.state = 'cancelled' THEN jsonb_set(u.entry::jsonb, '{0,note}',
            to_jsonb(j.stop_note || COALESCE(': ' || NULLIF(u.entry::jsonb->0->>'note', ''), '')))
        -- The worker did not hear of the request: its entry for the run becomes the
        -- request's (one entry per run), its note kept after the reason.
        WHEN u.state IN ('available', 'scheduled', 'waiting') THEN jsonb_set(jsonb_set(u.entry::jsonb, '{0,event}', to_jsonb(j.stop_event)),
            '{0,note}', to_jsonb(j.stop_note || COALESCE(': ' || NULLIF(u.entry::jsonb->0->>'note', ''), '')))
        ELSE u.entry::jsonb END
FROM u
-- A matching token implies state = 'running' (CHECK venturi_job_running_has_lease).
WHERE j.id = ANY(ARRAY(SELECT u.id FROM u)) AND j.id = u.id AND j.lease_token = u.token
RETURNING j.id;

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
    runs = j.runs - 1, lease_token = NULL, lease_expires_at = NULL
WHERE j.id = ANY(ARRAY(SELECT locked.id FROM locked))
RETURNING j.id;
