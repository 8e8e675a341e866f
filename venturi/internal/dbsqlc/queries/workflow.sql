-- name: InsertWorkflow :many
-- Inserts a workflow; with a key that an open workflow has, inserts nothing and returns no
-- row (OpenWorkflowByKey then finds it: this statement's snapshot may not see it).
INSERT INTO venturi_workflow (id, kind, name, key, fail_fast)
VALUES (@id, @kind::smallint, @name::text, NULLIF(@key::text, ''), @fail_fast::boolean)
ON CONFLICT (key) WHERE key IS NOT NULL AND state = 'open' DO NOTHING
RETURNING id;

-- name: OpenWorkflowByKey :one
SELECT id FROM venturi_workflow WHERE key = @key::text AND state = 'open';

-- name: InsertWorkflowNodes :exec
-- Inserts a workflow's nodes, given as a JSON array of objects (node, job_id, policy,
-- deps, parent, sealed, released, delay_us); venturi_workflow_settle initialises them.
INSERT INTO venturi_workflow_node (workflow_id, node, job_id, policy, deps, parent, sealed, released, delay_us)
SELECT @workflow_id, n.node, n.job_id, n.policy, COALESCE(n.deps, '{}'), n.parent, n.sealed, n.released, n.delay_us
FROM jsonb_to_recordset((@nodes::text)::jsonb) AS n(node text, job_id uuid, policy smallint, deps text[], parent text,
                                             sealed boolean, released boolean, delay_us bigint);

-- name: InsertWorkflowJobs :exec
-- Inserts a workflow's jobs as InsertJobs inserts jobs, with their workflow, blocked
-- unless released (a root: available, or scheduled when it is due later).
INSERT INTO venturi_job (id, kind, queue, state, priority, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta, workflow_id)
SELECT u.id, u.kind, u.queue,
       CASE WHEN NOT u.released THEN 'blocked' WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
       u.priority, u.payload::jsonb, t.at,
       CASE WHEN u.has_part THEN u.part WHEN vk.limited THEN '' END,
       NULLIF(u.slot_key, ''), CASE WHEN u.slot_key <> '' THEN u.slot_limit END, CASE WHEN u.slot_key <> '' THEN u.slot_policy END,
       u.events, NULLIF(u.meta, '')::jsonb, @workflow_id
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@kinds::text[]) AS kind, unnest(@queues::text[]) AS queue, unnest(@priorities::smallint[]) AS priority, unnest(@payloads::text[]) AS payload, unnest(@has_at::bool[]) AS has_at, unnest(@ats::timestamptz[]) AS at, unnest(@delays_us::bigint[]) AS delay_us, unnest(@has_part::bool[]) AS has_part, unnest(@parts::text[]) AS part, unnest(@slot_keys::text[]) AS slot_key, unnest(@slot_limits::int[]) AS slot_limit, unnest(@slot_policies::smallint[]) AS slot_policy, unnest(@events::bool[]) AS events, unnest(@metas::text[]) AS meta, unnest(@released::bool[]) AS released, generate_subscripts(@ids::uuid[], 1) AS ord) AS u
LEFT JOIN venturi_kind vk ON vk.kind = u.kind
CROSS JOIN LATERAL (
    SELECT CASE WHEN u.has_at THEN u.at ELSE now() END + u.delay_us * interval '1 microsecond' AS at
) t
ORDER BY u.ord;

-- name: SettleWorkflows :one
-- Settles the given workflows in this transaction (schema/functions/venturi_workflow_settle.sql).
SELECT venturi_workflow_settle(@ids::uuid[], @channel::text)::int AS applied;

-- name: ResolveWorkflows :one
-- A resolver's pass: settles up to max workflows with unsettled changes, skipping those
-- another transaction holds (schema/functions/venturi_workflow_resolve.sql).
SELECT venturi_workflow_resolve(@channel::text, @max::int)::int AS applied;

-- name: CancelWorkflow :one
-- Requests a workflow's cancel; returns the jobs of its released members that have not
-- ended (to cancel as Cancel does), or NULL when it is not open.
SELECT venturi_workflow_cancel(@id, @note::text, @channel::text)::uuid[] AS running;

-- name: SealWorkflowGroup :one
SELECT venturi_workflow_seal(@id, @node::text, @channel::text)::boolean AS sealed;

-- name: WorkflowByID :one
SELECT w.id, w.kind, w.name, COALESCE(w.key, '')::text AS key, w.state, w.fail_fast, w.attempt, w.open_nodes, w.nodes,
       w.cancel_requested_at, COALESCE(w.cancel_note, '')::text AS cancel_note, w.created_at, w.finished_at
FROM venturi_workflow w WHERE w.id = @id;

-- name: WorkflowNodes :many
-- A workflow's nodes, in name order, with their jobs' states wherever the jobs are.
SELECT n.node, n.job_id, n.policy, n.deps, COALESCE(n.parent, '')::text AS parent, n.sealed, n.released,
       COALESCE(n.own, '')::text AS own, COALESCE(n.outcome, '')::text AS outcome,
       n.n_deps, n.waiting, n.holds, n.created_at, n.ended_at,
       COALESCE((SELECT j.state::text FROM venturi_job_all j WHERE j.id = n.job_id), '')::text AS job_state
FROM venturi_workflow_node n
WHERE n.workflow_id = @workflow_id AND n.node > @after::text
ORDER BY n.node
LIMIT @max::int;

-- name: WorkflowChannel :one
-- The channel the resolvers listen on (schema/functions/venturi_workflow_channel.sql).
SELECT venturi_workflow_channel()::text AS channel;

-- name: LockWorkflow :one
-- Locks a workflow's row for a change of its graph (nodes added), and returns its state
-- and kind.
SELECT state, kind FROM venturi_workflow WHERE id = @id FOR NO KEY UPDATE;

-- name: ShareWorkflows :exec
-- Holds the given workflows against a settle until this transaction ends: a run's end
-- that attaches nodes locks them before its finish, so that no settle sees the run's end
-- without the nodes it attached. In ID order, the lock order.
SELECT w.id FROM venturi_workflow w WHERE w.id = ANY(@ids::uuid[]) ORDER BY w.id FOR SHARE;

-- name: WorkflowGraph :many
-- A workflow's nodes as a graph (what each needs and is attached to), to check the nodes
-- added to it.
SELECT n.node, n.deps, COALESCE(n.parent, '')::text AS parent, (n.job_id IS NULL)::boolean AS grp, n.sealed
FROM venturi_workflow_node n WHERE n.workflow_id = @workflow_id;

-- name: NodeOfJob :one
-- The workflow and node a job is a member of.
SELECT n.workflow_id, n.node FROM venturi_workflow_node n WHERE n.job_id = @job_id;

-- name: WriteOutputs :exec
-- Stores the outputs of runs whose completion this transaction wrote, for the nodes their
-- jobs are (a job outside workflows has none: nothing is stored). A later completion of
-- the same node (a retried workflow) replaces its output.
INSERT INTO venturi_workflow_output (workflow_id, node, output, token)
SELECT n.workflow_id, n.node, o.output::jsonb, o.token
FROM (SELECT unnest(@job_ids::uuid[]) AS job_id, unnest(@outputs::text[]) AS output, unnest(@tokens::bigint[]) AS token) AS o
JOIN venturi_workflow_node n ON n.job_id = o.job_id
ON CONFLICT (workflow_id, node) DO UPDATE SET output = EXCLUDED.output, token = EXCLUDED.token, written_at = now();

-- name: UpstreamOutputs :many
-- The outputs a job's node can read: those of the nodes it needs and of every node
-- attached to them (a group's members, a spawner's children), at any depth.
WITH RECURSIVE me AS (
    SELECT n.workflow_id, n.deps FROM venturi_workflow_node n WHERE n.job_id = @job_id
), up AS (
    SELECT me.workflow_id, d.dep AS node FROM me, unnest(me.deps) AS d(dep)
    UNION
    SELECT c.workflow_id, c.node FROM up JOIN venturi_workflow_node c ON c.workflow_id = up.workflow_id AND c.parent = up.node
)
SELECT o.node, o.output FROM up JOIN venturi_workflow_output o ON o.workflow_id = up.workflow_id AND o.node = up.node
ORDER BY o.node;

-- name: WorkflowOutput :one
SELECT o.output FROM venturi_workflow_output o WHERE o.workflow_id = @workflow_id AND o.node = @node::text;

-- name: RetryWorkflowBegin :one
-- Begins a workflow's retry under its row lock: the cancel (a fail-fast's too) is lifted
-- and the attempt counted; returns the jobs whose runs failed or were cancelled (to retry:
-- they go back blocked) and the nodes a cancel decided (to decide again).
WITH w AS (
    UPDATE venturi_workflow SET cancel_requested_at = NULL, cancel_note = NULL, fail_fast_tripped = false,
        attempt = attempt + 1
    WHERE id = @id
    RETURNING id
)
SELECT w.id,
       ARRAY(SELECT n.job_id FROM venturi_workflow_node n
             WHERE n.workflow_id = w.id AND n.job_id IS NOT NULL AND n.run IN ('fail', 'cancel') ORDER BY n.job_id)::uuid[] AS jobs,
       ARRAY(SELECT n.node FROM venturi_workflow_node n
             WHERE n.workflow_id = w.id AND n.own = 'cancel' AND n.run IS NULL ORDER BY n.node)::text[] AS touch
FROM w;

-- name: SettleWorkflowTouch :one
-- Settles one workflow whose row this transaction holds, deciding the touched nodes again.
SELECT venturi_workflow_settle_one(@id, @channel::text, @touch::text[])::int AS applied;

-- name: AwaitWorkflow :one
-- Registers a waiter's channel on a workflow that is open; no row when it has finished
-- (or does not exist).
UPDATE venturi_workflow SET await_channel = @channel::text
WHERE id = @id AND state = 'open'
RETURNING id;

-- name: EndedWorkflows :many
-- Which of the given workflows have finished or are gone: the awaiters' poll.
SELECT x.id::uuid AS id
FROM unnest(@ids::uuid[]) AS x(id)
LEFT JOIN venturi_workflow w ON w.id = x.id
WHERE w.id IS NULL OR w.state <> 'open';

-- name: PruneWorkflows :execrows
-- Deletes a batch of finished workflows past their retention (succeeded ones after
-- completed_us, failed and cancelled ones after dead_us), with their nodes and outputs.
-- Their jobs' rows keep their retention of their own.
DELETE FROM venturi_workflow
WHERE id IN (
    SELECT w.id FROM venturi_workflow w
    WHERE w.state <> 'open'
      AND w.finished_at < now() - interval '1 microsecond' * CASE WHEN w.state = 'succeeded' THEN @completed_us::bigint ELSE @dead_us::bigint END
    ORDER BY w.finished_at
    LIMIT @max::int
);

-- name: CancellingMembers :many
-- The released members that have not ended and have not been asked to stop, of the open
-- workflows being cancelled (a fail-fast that tripped in a settle, a CancelWorkflow whose
-- caller did not cancel them all): the resolvers cancel them as Cancel does.
SELECT n.job_id AS id, COALESCE(w.cancel_note, 'workflow cancelled')::text AS note
FROM venturi_workflow w
JOIN venturi_workflow_node n ON n.workflow_id = w.id AND n.job_id IS NOT NULL AND n.released AND n.run IS NULL
JOIN venturi_job j ON j.id = n.job_id AND j.state IN ('scheduled', 'available', 'waiting', 'running') AND j.stop_event IS NULL
WHERE w.state = 'open' AND w.cancel_requested_at IS NOT NULL
ORDER BY n.job_id
LIMIT @max::int;

-- name: BatchCounts :one
-- A batch's members (the nodes attached to its members group) by the outcome they
-- propagated, counted from the nodes as they stand.
SELECT w.kind, w.state, COALESCE(g.sealed, true)::boolean AS sealed,
       count(n.node)::int AS total,
       count(n.node) FILTER (WHERE n.outcome = 'ok')::int AS succeeded,
       count(n.node) FILTER (WHERE n.outcome IN ('fail', 'dfail'))::int AS failed,
       count(n.node) FILTER (WHERE n.outcome IS NOT NULL AND n.outcome NOT IN ('ok', 'fail', 'dfail'))::int AS cancelled
FROM venturi_workflow w
LEFT JOIN venturi_workflow_node g ON g.workflow_id = w.id AND g.node = @members::text
LEFT JOIN venturi_workflow_node n ON n.workflow_id = w.id AND n.parent = @members::text
WHERE w.id = @id
GROUP BY w.kind, w.state, g.sealed;
