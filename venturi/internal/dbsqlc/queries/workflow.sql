-- name: InsertWorkflow :many
-- Inserts a workflow; with a key that an open workflow has, inserts nothing and returns no
-- row (OpenWorkflowByKey then finds it: this statement's snapshot may not see it).
INSERT INTO venturi_workflow (id, name, key, fail_fast)
VALUES (@id, @name::text, NULLIF(@key::text, ''), @fail_fast::boolean)
ON CONFLICT (key) WHERE key IS NOT NULL AND state = 'open' DO NOTHING
RETURNING id;

-- name: OpenWorkflowByKey :one
SELECT id FROM venturi_workflow WHERE key = @key::text AND state = 'open';

-- name: InsertWorkflowNodes :exec
-- Inserts a workflow's nodes, given as a JSON array of objects (node, job_id, policy,
-- deps, parent, sealed, released, delay_us); venturi_workflow_settle initialises them.
INSERT INTO venturi_workflow_node (workflow_id, node, job_id, policy, deps, parent, sealed, released, delay_us)
SELECT @workflow_id, n.node, n.job_id, n.policy, COALESCE(n.deps, '{}'), n.parent, n.sealed, n.released, n.delay_us
FROM jsonb_to_recordset(@nodes::jsonb) AS n(node text, job_id uuid, policy smallint, deps text[], parent text,
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
