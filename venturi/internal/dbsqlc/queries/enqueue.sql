-- name: InsertJob :exec
-- A job with a partition or a slot, or of a kind with limits, is gated: part is its
-- partition (empty for none) and the gated claim takes it.
INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta)
SELECT @id, @kind, @queue::text, CASE WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
       @priority, sqlc.narg(dedup_key), (@payload::text)::jsonb, t.at,
       COALESCE(sqlc.narg(part)::text, (SELECT '' FROM venturi_kind vk WHERE vk.kind = @kind AND vk.limited)),
       sqlc.narg(slot_key)::text, sqlc.narg(slot_limit)::int, sqlc.narg(slot_policy)::smallint,
       sqlc.arg(events)::bool, sqlc.narg(meta)::jsonb
FROM (SELECT COALESCE(sqlc.narg(at)::timestamptz, now()) + interval '1 microsecond' * @delay_us::bigint AS at) t;

-- name: InsertJobs :exec
INSERT INTO venturi_job (id, kind, queue, state, priority, payload, run_at, part, slot_key, slot_limit, slot_policy, events, meta)
SELECT u.id, u.kind, u.queue, CASE WHEN t.at <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
       u.priority, u.payload::jsonb, t.at,
       CASE WHEN u.has_part THEN u.part WHEN vk.limited THEN '' END,
       NULLIF(u.slot_key, ''), CASE WHEN u.slot_key <> '' THEN u.slot_limit END, CASE WHEN u.slot_key <> '' THEN u.slot_policy END,
       u.events, NULLIF(u.meta, '')::jsonb
FROM (SELECT unnest(@ids::uuid[]) AS id, unnest(@kinds::text[]) AS kind, unnest(@queues::text[]) AS queue, unnest(@priorities::smallint[]) AS priority, unnest(@payloads::text[]) AS payload, unnest(@has_at::bool[]) AS has_at, unnest(@ats::timestamptz[]) AS at, unnest(@delays_us::bigint[]) AS delay_us, unnest(@has_part::bool[]) AS has_part, unnest(@parts::text[]) AS part, unnest(@slot_keys::text[]) AS slot_key, unnest(@slot_limits::int[]) AS slot_limit, unnest(@slot_policies::smallint[]) AS slot_policy, unnest(@events::bool[]) AS events, unnest(@metas::text[]) AS meta, generate_subscripts(@ids::uuid[], 1) AS ord) AS u
LEFT JOIN venturi_kind vk ON vk.kind = u.kind
CROSS JOIN LATERAL (
    SELECT CASE WHEN u.has_at THEN u.at ELSE now() END + u.delay_us * interval '1 microsecond' AS at
) t
-- In the order given: a partition's jobs get their virtual times in insertion order
-- (trigger venturi_job_vt_insert, schema/functions/venturi_job_vt.sql), and the join may
-- reorder the rows.
ORDER BY u.ord;
