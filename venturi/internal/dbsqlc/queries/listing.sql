-- name: ListSettings :exec
-- The listing's transaction: every statement bounded by statement_timeout, planned for its
-- own parameters (ListJobs folds the branches and filters it does not use away, which a
-- generic plan cannot), without parallel workers (a page reads a page of rows; a worker's
-- start costs more, and the branches that fold away would still start theirs) and without
-- JIT (the branches' never-executed scans are priced high enough to compile the query:
-- 50-150 ms for a page that reads a few buffers).
SELECT set_config('statement_timeout', @timeout_ms::text, true),
       set_config('plan_cache_mode', 'force_custom_plan', true),
       set_config('max_parallel_workers_per_gather', '0', true),
       set_config('jit', 'off', true);

-- name: ListJobs :many
-- One page of the jobs that match a filter, pending or finished (venturi_job_all: venturi_job
-- and venturi_job_history in one snapshot), in one of the listing orders (order_by): each
-- branch below walks one index in its order from the cursor, and the planner drops the
-- branches and filters whose parameters rule them out (the transaction plans every
-- execution for its parameters, see ListSettings). The filter (m) is written once and
-- inlined into the branch that runs.
--   id        every state: newest first by ID (the primary key); cursor c_id
--   run_at    one state, scheduled or waiting: by due time, then ID; cursor (c_ts, c_id)
--   lease     running: by lease expiry, then ID
--   finished  one state, completed, dead or cancelled: newest finished first
--   plain     available plain jobs of queue c_queue in claim order, from segment seg:
--             0 from the start, 1 after (c_prio, c_ts, c_id) in the same priority, 2 below
--             priority c_prio
--   gated     available gated jobs of c_queue by partition, then in claim order: seg 0 from
--             the start, 1 and 2 as plain within partition c_part, 3 after partition c_part
-- The predicates no index serves (a note, payload or attachment match, a dedup key without
-- a kind: key_search; with kinds, dedup_key may use the dedup index) are not in m's
-- WHERE but its hit column: a branch reads at most scan jobs of its range (its search
-- window) and returns the first max that hit, or, when the window ends first, the hits
-- and the window's last job with hit false (where the next page resumes). Without such a
-- predicate hit is true and scan is max: the branch reads max jobs. The branch returns
-- the page's IDs in its order; the caller sorts the rows again (the join that reads them
-- may not keep it). summary false skips the journal (the bulk actions' walk reads only
-- IDs and states).
WITH m AS NOT MATERIALIZED (
    SELECT j.id, j.queue, j.state, j.priority, j.part, j.run_at, j.finished_at, j.lease_expires_at,
           ((@key_search::text = '' OR j.dedup_key IS NOT DISTINCT FROM @key_search::text)
            AND (@note_pattern::text = '' OR EXISTS (
                SELECT 1 FROM jsonb_array_elements(j.journal) AS e(x) WHERE e.x->>'note' ILIKE @note_pattern::text))
            AND (cardinality(@payload_paths::text[]) = 0 OR NOT EXISTS (
                SELECT 1 FROM (SELECT unnest(@payload_paths::text[]) AS p, unnest(@payload_values::text[]) AS v) pm
                WHERE venturi_json_text(j.payload, string_to_array(pm.p, chr(31))) IS DISTINCT FROM pm.v))
            AND (cardinality(@attachment_paths::text[]) = 0 OR NOT EXISTS (
                SELECT 1 FROM (SELECT unnest(@attachment_paths::text[]) AS p, unnest(@attachment_values::text[]) AS v) am
                WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(j.journal) AS e(x)
                                  WHERE venturi_json_text(e.x->'attachment', string_to_array(am.p, chr(31))) = am.v)))
           ) AS hit
    FROM venturi_job_all j
    WHERE (cardinality(@ids::uuid[]) = 0 OR j.id = ANY(@ids::uuid[]))
      AND (cardinality(@states::text[]) = 0 OR j.state = ANY((@states::text[])::venturi_job_state[]))
      AND (cardinality(@kinds::text[]) = 0 OR j.kind = ANY(@kinds::text[]))
      AND (cardinality(@queues::text[]) = 0 OR j.queue = ANY(@queues::text[]))
      AND (@dedup_key::text = '' OR j.dedup_key = @dedup_key::text)
      -- A workflow's jobs: venturi_job's through its workflow index, the history's (which has
      -- none) by the IDs of the workflow's job nodes, through the history's ID index.
      AND (NOT @has_workflow::bool OR (j.workflow_id = @workflow_id::uuid
           AND (NOT j.in_history OR j.id = ANY(ARRAY(SELECT n.job_id FROM venturi_workflow_node n
                                                      WHERE n.workflow_id = @workflow_id::uuid AND n.job_id IS NOT NULL)))))
      -- Creation time, with the ID bounded by the ULID's time give or take skew_us, so that
      -- the primary key narrows the scan (created_at decides).
      AND (NOT @has_after::bool OR (j.created_at >= @after::timestamptz
           AND j.id >= venturi_ulid_floor(@after::timestamptz, @skew_us::bigint)))
      AND (NOT @has_before::bool OR (j.created_at < @before::timestamptz
           AND j.id < venturi_ulid_floor(@before::timestamptz, @minus_skew_us::bigint)))
      AND (@within_us::bigint = 0 OR (j.created_at > now() - interval '1 microsecond' * @within_us::bigint
           AND j.id >= venturi_ulid_floor(now(), @within_skew_us::bigint)))
)
SELECT j.id, j.kind, j.queue, j.state, j.priority, j.dedup_key, j.part, j.run_at, j.runs, j.failures,
       j.created_at, j.attempted_at, j.finished_at, j.lease_expires_at, j.worker_id,
       (j.stop_requested_at IS NOT NULL)::bool AS stop_requested,
       (CASE WHEN @summary::bool THEN COALESCE(j.journal->-1->>'event', '') ELSE '' END)::text AS last_event,
       (CASE WHEN @summary::bool THEN left(COALESCE(j.journal->-1->>'note', ''), 1024) ELSE '' END)::text AS last_note,
       p.hit::bool AS hit
FROM (
    -- Each branch: its window (x) of at most scan jobs, with the hits so far (hits) and the
    -- position (rn) of each; the hits up to max, or the window's last job when it ends
    -- short of max hits. The outer LIMIT stops the walk at the max-th hit. x's LIMIT keeps
    -- it a subquery, so that hit is computed once per job.
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.hit FROM m
              WHERE @order_by::text = 'id' AND (NOT @has_cursor::bool OR m.id < @c_id::uuid)
                -- One state (blocked, the one state listed in this order) as its type:
                -- its partial index applies, and the history's lanes are excluded.
                AND (cardinality(@states::text[]) <> 1 OR m.state = @state::venturi_job_state)
              ORDER BY m.id DESC
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.id DESC ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.run_at, m.hit FROM m
              WHERE @order_by::text = 'run_at' AND m.state = @state::venturi_job_state
                AND (NOT @has_cursor::bool OR (m.run_at, m.id) > (@c_ts::timestamptz, @c_id::uuid))
              ORDER BY m.run_at, m.id
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.run_at, x.id ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.lease_expires_at, m.hit FROM m
              WHERE @order_by::text = 'lease' AND m.state = 'running'
                AND (NOT @has_cursor::bool OR (m.lease_expires_at, m.id) > (@c_ts::timestamptz, @c_id::uuid))
              ORDER BY m.lease_expires_at, m.id
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.lease_expires_at, x.id ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.finished_at, m.hit FROM m
              WHERE @order_by::text = 'finished' AND m.state = @state::venturi_job_state
                AND (NOT @has_cursor::bool OR (m.finished_at, m.id) < (@c_ts::timestamptz, @c_id::uuid))
              ORDER BY m.finished_at DESC, m.id DESC
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.finished_at DESC, x.id DESC ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.priority, m.run_at, m.hit FROM m
              WHERE @order_by::text = 'plain' AND m.state = 'available' AND m.part IS NULL AND m.queue = @c_queue::text
                AND (@seg::int = 0
                     OR (@seg::int = 1 AND m.priority = @c_prio::smallint AND (m.run_at, m.id) > (@c_ts::timestamptz, @c_id::uuid))
                     OR (@seg::int = 2 AND m.priority < @c_prio::smallint))
              ORDER BY m.priority DESC, m.run_at, m.id
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.priority DESC, x.run_at, x.id ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
    UNION ALL
    (SELECT w.id, w.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT m.id, m.part, m.priority, m.run_at, m.hit FROM m
              WHERE @order_by::text = 'gated' AND m.state = 'available' AND m.part IS NOT NULL AND m.queue = @c_queue::text
                AND (@seg::int = 0
                     OR (@seg::int = 1 AND m.part = @c_part::text AND m.priority = @c_prio::smallint
                         AND (m.run_at, m.id) > (@c_ts::timestamptz, @c_id::uuid))
                     OR (@seg::int = 2 AND m.part = @c_part::text AND m.priority < @c_prio::smallint)
                     OR (@seg::int = 3 AND m.part > @c_part::text))
              ORDER BY m.part, m.priority DESC, m.run_at, m.id
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.part, x.priority DESC, x.run_at, x.id ROWS UNBOUNDED PRECEDING)) w
     WHERE (w.hit AND w.hits <= @max::int) OR (w.rn = @scan::int AND w.hits < @max::int)
     LIMIT @max::int)
) p
-- The page's rows by ID, in the listing's snapshot.
JOIN venturi_job_all j ON j.id = p.id;

-- name: CountMatchingJobs :many
-- How many jobs match a filter, by state and whether they are a supervised singleton's (a
-- part that starts with singleton_prefix), counting at most max: a bulk action's dry run
-- in one statement. The filter is ListJobs' m, its hit column a predicate here
-- (TestCountMatchingJobsFilterIsListJobsFilter keeps the two alike).
SELECT c.state::text AS state, c.singleton::bool AS singleton, count(*)::bigint AS n
FROM (
    SELECT j.state, starts_with(COALESCE(j.part, ''), @singleton_prefix::text) AS singleton
    FROM venturi_job_all j
    -- The one state of a filter on one, as its type: the state's partial index applies.
    WHERE (sqlc.narg(one_state)::venturi_job_state IS NULL OR j.state = sqlc.narg(one_state)::venturi_job_state)
      AND (cardinality(@ids::uuid[]) = 0 OR j.id = ANY(@ids::uuid[]))
      AND (cardinality(@states::text[]) = 0 OR j.state = ANY((@states::text[])::venturi_job_state[]))
      AND (cardinality(@kinds::text[]) = 0 OR j.kind = ANY(@kinds::text[]))
      AND (cardinality(@queues::text[]) = 0 OR j.queue = ANY(@queues::text[]))
      AND (@dedup_key::text = '' OR j.dedup_key = @dedup_key::text)
      -- A workflow's jobs: venturi_job's through its workflow index, the history's (which has
      -- none) by the IDs of the workflow's job nodes, through the history's ID index.
      AND (NOT @has_workflow::bool OR (j.workflow_id = @workflow_id::uuid
           AND (NOT j.in_history OR j.id = ANY(ARRAY(SELECT n.job_id FROM venturi_workflow_node n
                                                      WHERE n.workflow_id = @workflow_id::uuid AND n.job_id IS NOT NULL)))))
      -- Creation time, with the ID bounded by the ULID's time give or take skew_us, so that
      -- the primary key narrows the scan (created_at decides).
      AND (NOT @has_after::bool OR (j.created_at >= @after::timestamptz
           AND j.id >= venturi_ulid_floor(@after::timestamptz, @skew_us::bigint)))
      AND (NOT @has_before::bool OR (j.created_at < @before::timestamptz
           AND j.id < venturi_ulid_floor(@before::timestamptz, @minus_skew_us::bigint)))
      AND (@within_us::bigint = 0 OR (j.created_at > now() - interval '1 microsecond' * @within_us::bigint
           AND j.id >= venturi_ulid_floor(now(), @within_skew_us::bigint)))
      AND
           ((@key_search::text = '' OR j.dedup_key IS NOT DISTINCT FROM @key_search::text)
            AND (@note_pattern::text = '' OR EXISTS (
                SELECT 1 FROM jsonb_array_elements(j.journal) AS e(x) WHERE e.x->>'note' ILIKE @note_pattern::text))
            AND (cardinality(@payload_paths::text[]) = 0 OR NOT EXISTS (
                SELECT 1 FROM (SELECT unnest(@payload_paths::text[]) AS p, unnest(@payload_values::text[]) AS v) pm
                WHERE venturi_json_text(j.payload, string_to_array(pm.p, chr(31))) IS DISTINCT FROM pm.v))
            AND (cardinality(@attachment_paths::text[]) = 0 OR NOT EXISTS (
                SELECT 1 FROM (SELECT unnest(@attachment_paths::text[]) AS p, unnest(@attachment_values::text[]) AS v) am
                WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(j.journal) AS e(x)
                                  WHERE venturi_json_text(e.x->'attachment', string_to_array(am.p, chr(31))) = am.v)))
           )
    LIMIT @max::int
) c
GROUP BY c.state, c.singleton;

-- name: NextAvailableQueue :one
-- The first queue after the given name that has available jobs (plain or gated), through
-- the claim indexes; '' when none.
SELECT COALESCE(LEAST(
    (SELECT j.queue FROM venturi_job j WHERE j.state = 'available' AND j.part IS NULL AND j.queue > @after::text
     ORDER BY j.queue LIMIT 1),
    (SELECT j.queue FROM venturi_job j WHERE j.state = 'available' AND j.part IS NOT NULL AND j.queue > @after::text
     ORDER BY j.queue LIMIT 1)), '')::text AS queue;
