-- name: CronLock :one
-- A schedule's row, locked for a registration, a pause or a resume, with the database
-- time and whether its payload equals payload. No row: the schedule does not exist.
SELECT c.spec, c.time_zone, c.kind, c.queue, c.priority, c.payload::text AS payload, c.dedup_key,
       c.part, c.slot_key, c.slot_limit, c.slot_policy, c.missed, c.backfill, c.grace_us,
       c.paused, c.next_fire, c.last_fire, c.skipped_pending, now()::timestamptz AS now,
       (c.payload = (@payload::text)::jsonb)::bool AS same_payload
FROM venturi_cron c WHERE c.name = @name::text
FOR UPDATE;

-- name: CronNow :one
SELECT now()::timestamptz AS now;

-- name: CronInsert :execrows
-- Creates a schedule unless one of the name exists (a concurrent registration won).
INSERT INTO venturi_cron (name, spec, time_zone, kind, queue, priority, payload, dedup_key, part,
                          slot_key, slot_limit, slot_policy, missed, backfill, grace_us, next_fire)
VALUES (@name::text, @spec::text, @time_zone::text, @kind::text, @queue::text, @priority, (@payload::text)::jsonb,
        @dedup_key::text, sqlc.narg(part)::text, sqlc.narg(slot_key)::text, sqlc.narg(slot_limit)::int,
        sqlc.narg(slot_policy)::smallint, @missed::text, @backfill::int, @grace_us::bigint, @next_fire::timestamptz)
ON CONFLICT (name) DO NOTHING;

-- name: CronUpdate :exec
-- A changed definition; next_fire is recomputed by the caller when the time rule changed.
UPDATE venturi_cron SET spec = @spec::text, time_zone = @time_zone::text, kind = @kind::text,
    queue = @queue::text, priority = @priority, payload = (@payload::text)::jsonb, dedup_key = @dedup_key::text,
    part = sqlc.narg(part)::text, slot_key = sqlc.narg(slot_key)::text, slot_limit = sqlc.narg(slot_limit)::int,
    slot_policy = sqlc.narg(slot_policy)::smallint, missed = @missed::text, backfill = @backfill::int,
    grace_us = @grace_us::bigint, next_fire = @next_fire::timestamptz, skipped_pending = @skipped_pending::int,
    updated_at = now()
WHERE name = @name::text;

-- name: CronSetPaused :exec
-- Pauses or resumes a locked schedule; a resume sets the next fire after now.
UPDATE venturi_cron SET paused = @paused::bool, next_fire = @next_fire::timestamptz,
    paused_at = CASE WHEN @paused::bool THEN now() END
WHERE name = @name::text;

-- name: CronDelete :execrows
DELETE FROM venturi_cron WHERE name = @name::text;

-- name: CronDue :one
-- The earliest due schedule that no other worker is firing, locked, with the database
-- time (or the test's). Schedules in skip failed to load in this worker (an unknown time
-- zone, an expression of a newer version) and are left to others.
SELECT c.name, c.spec, c.time_zone, c.kind, c.dedup_key, c.missed, c.backfill, c.grace_us,
       c.next_fire, c.skipped_pending, t.now::timestamptz AS now
FROM (SELECT COALESCE(sqlc.narg(now)::timestamptz, now()) AS now) t
JOIN venturi_cron c ON NOT c.paused AND c.next_fire <= t.now AND c.name <> ALL(@skip::text[])
ORDER BY c.next_fire
LIMIT 1
FOR UPDATE OF c SKIP LOCKED;

-- name: CronFire :one
-- One fire of a locked schedule: its ledger row and its job, in one statement. A schedule
-- with a dedup key merges (keeps) into a pending job of its kind and key instead of adding
-- one. A fire time already in the ledger enqueues nothing (action '').
WITH cand AS (
    SELECT j.id FROM venturi_job j
    WHERE @dedup_key::text <> '' AND j.kind = @kind::text AND j.dedup_key = @dedup_key::text
      AND j.state IN ('scheduled', 'available')
    ORDER BY j.id DESC
    LIMIT 1
), fire AS (
    INSERT INTO venturi_cron_fire (schedule, fire_at, job_id, action, covers, skipped)
    SELECT @name::text, @fire_at::timestamptz, COALESCE((SELECT id FROM cand), @id::uuid),
           CASE WHEN EXISTS (SELECT 1 FROM cand) THEN 'kept' ELSE 'inserted' END,
           @covers::int, @skipped::int
    ON CONFLICT (schedule, fire_at) DO NOTHING
    RETURNING job_id, action
), ins AS (
    INSERT INTO venturi_job (id, kind, queue, state, priority, dedup_key, payload, run_at, part, slot_key, slot_limit, slot_policy)
    SELECT f.job_id, c.kind, c.queue,
           CASE WHEN @fire_at::timestamptz <= now() THEN 'available' ELSE 'scheduled' END::venturi_job_state,
           c.priority, NULLIF(c.dedup_key, ''), c.payload, @fire_at::timestamptz,
           COALESCE(c.part, (SELECT '' FROM venturi_kind vk WHERE vk.kind = c.kind AND vk.limited)),
           c.slot_key, c.slot_limit, c.slot_policy
    FROM fire f JOIN venturi_cron c ON c.name = @name::text
    WHERE f.action = 'inserted'
    RETURNING id
)
SELECT f.job_id, f.action FROM fire f;

-- name: CronAdvance :exec
-- Moves a fired schedule past what it handled, in the fires' transaction.
UPDATE venturi_cron SET next_fire = @next_fire::timestamptz,
    last_fire = COALESCE(sqlc.narg(last_fire)::timestamptz, last_fire),
    last_job = COALESCE(sqlc.narg(last_job)::uuid, last_job),
    last_run_at = now(), fires = fires + @fires::int, skipped = skipped + @skipped::int,
    coalesced = coalesced + @coalesced::int, skipped_pending = @skipped_pending::int
WHERE name = @name::text;

-- name: CronNextDue :one
-- How long until the earliest schedule is due, by the database clock (no row: none).
SELECT (EXTRACT(EPOCH FROM (next_fire - now())) * 1000000)::bigint AS due_in_us
FROM venturi_cron WHERE NOT paused
ORDER BY next_fire
LIMIT 1;

-- name: CronList :many
SELECT name, spec, time_zone, kind, queue, priority, payload, dedup_key, missed, backfill, grace_us,
       paused, paused_at, next_fire, last_fire, last_job, last_run_at, fires, skipped, coalesced,
       created_at, updated_at
FROM venturi_cron
WHERE sqlc.narg(name)::text IS NULL OR name = sqlc.narg(name)::text
ORDER BY name;

-- name: CronFires :many
-- A schedule's ledger, newest fire first.
SELECT fire_at, job_id, action, covers, skipped, enqueued_at
FROM venturi_cron_fire
WHERE schedule = @name::text AND (sqlc.narg(before)::timestamptz IS NULL OR fire_at < sqlc.narg(before)::timestamptz)
ORDER BY fire_at DESC
LIMIT @max::int;

-- name: CronPruneFires :execrows
-- Deletes ledger rows older than the retention, a batch at a time.
DELETE FROM venturi_cron_fire
WHERE ctid = ANY (ARRAY(SELECT ctid FROM venturi_cron_fire
                        WHERE enqueued_at < now() - interval '1 microsecond' * @age_us::bigint
                        LIMIT @max::int));
