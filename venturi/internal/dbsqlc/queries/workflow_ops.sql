-- name: ListWorkflows :many
-- The operations API's listing of workflows (ops_workflows.go): one page of the workflows
-- that match a filter, newest first by ID (the primary key), after the cursor c_id. The
-- created-time bounds are in the WHERE (the ID bounded by the ULID's time give or take
-- skew_us, so that the primary key narrows the scan, as ListJobs does); the state, kind
-- and name prefix, which no index serves, are the hit column: the statement reads at most
-- scan workflows (its search window) and returns the first max that hit, or, when the
-- window ends first, the hits and the window's last workflow with hit false (where the
-- next page resumes). Without such a predicate scan is max. The caller sorts the rows
-- again (the join may not keep the order).
SELECT w.id, w.kind, w.name, COALESCE(w.key, '')::text AS key, w.state, w.fail_fast, w.attempt, w.open_nodes, w.nodes,
       w.cancel_requested_at, COALESCE(w.cancel_note, '')::text AS cancel_note, w.created_at, w.finished_at,
       p.hit::bool AS hit
FROM (
    SELECT x.id, x.hit FROM (
        SELECT x.id, x.hit, count(*) FILTER (WHERE x.hit) OVER o AS hits, row_number() OVER o AS rn
        FROM (SELECT w.id,
                     ((cardinality(@states::text[]) = 0 OR w.state = ANY(@states::text[]))
                      AND (@kind::smallint < 0 OR w.kind = @kind::smallint)
                      AND (@name_prefix::text = '' OR starts_with(w.name, @name_prefix::text))) AS hit
              FROM venturi_workflow w
              WHERE (NOT @has_cursor::bool OR w.id < @c_id::uuid)
                AND (NOT @has_after::bool OR (w.created_at >= @after::timestamptz
                     AND w.id >= venturi_ulid_floor(@after::timestamptz, @skew_us::bigint)))
                AND (NOT @has_before::bool OR (w.created_at < @before::timestamptz
                     AND w.id < venturi_ulid_floor(@before::timestamptz, @minus_skew_us::bigint)))
                AND (@within_us::bigint = 0 OR (w.created_at > now() - interval '1 microsecond' * @within_us::bigint
                     AND w.id >= venturi_ulid_floor(now(), @within_skew_us::bigint)))
              ORDER BY w.id DESC
              LIMIT @scan::int) x
        WINDOW o AS (ORDER BY x.id DESC ROWS UNBOUNDED PRECEDING)) x
    WHERE (x.hit AND x.hits <= @max::int) OR (x.rn = @scan::int AND x.hits < @max::int)
    LIMIT @max::int
) p
JOIN venturi_workflow w ON w.id = p.id;

-- name: WorkflowSummaryByID :one
-- One workflow with its kind (0: a workflow, 1: a batch).
SELECT w.id, w.kind, w.name, COALESCE(w.key, '')::text AS key, w.state, w.fail_fast, w.attempt, w.open_nodes, w.nodes,
       w.cancel_requested_at, COALESCE(w.cancel_note, '')::text AS cancel_note, w.created_at, w.finished_at
FROM venturi_workflow w
WHERE w.id = @id;

-- name: JobWorkflowWait :many
-- The workflow and node job_id is a member of, with what the node waits for: one row per
-- node it needs whose outcome has not propagated (it, or something attached to it, has not
-- ended), at most max, by name, each with its job's state wherever the job is; or one row
-- with an empty dep when there is none. No row: the job is in no workflow. By the node's job
-- index, then the nodes' primary key.
SELECT me.workflow_id, w.kind, w.name, w.state, (w.cancel_requested_at IS NOT NULL)::bool AS cancelling,
       me.node, me.policy, cardinality(me.deps)::int AS n_deps, me.waiting, me.released, me.delay_us,
       COALESCE(me.own, '')::text AS own,
       COALESCE(d.node, '')::text AS dep, COALESCE(d.grp, false)::bool AS dep_group, COALESCE(d.sealed, true)::bool AS dep_sealed,
       COALESCE(d.own, '')::text AS dep_own, COALESCE(d.holds, 0)::int AS dep_holds,
       COALESCE((SELECT j.state::text FROM venturi_job_all j WHERE j.id = d.job_id), '')::text AS dep_state
FROM venturi_workflow_node me
JOIN venturi_workflow w ON w.id = me.workflow_id
LEFT JOIN LATERAL (
    -- One primary-key probe per node it needs (LIMIT 1 keeps each a probe: a workflow may
    -- have many more nodes than one node needs).
    SELECT n.node, (n.job_id IS NULL) AS grp, n.sealed, n.own, n.holds, n.job_id
    FROM unnest(me.deps) AS x(dep)
    CROSS JOIN LATERAL (SELECT n.node, n.job_id, n.sealed, n.own, n.holds, n.outcome FROM venturi_workflow_node n
                        WHERE n.workflow_id = me.workflow_id AND n.node = x.dep LIMIT 1) n
    WHERE n.outcome IS NULL
    ORDER BY n.node
    LIMIT @max::int
) d ON true
WHERE me.job_id = @job_id
ORDER BY d.node;
