-- name: ReadEvents :many
-- Up to max events after the cursor (after_xid, after_seq), in (xid, seq) order, of
-- transactions older than every transaction still running: a transaction that has not
-- ended cannot add an event below what this returns, so a reader that resumes from the
-- last row misses nothing and repeats nothing.
SELECT e.xid::text AS xid, e.seq, e.at, e.job_id, e.kind, e.queue, e.event, e.run, e.state,
       COALESCE(e.note, '')::text AS note, COALESCE(e.worker, '')::text AS worker, e.started_at,
       e.run_at, COALESCE(e.delay_us, 0)::bigint AS delay_us, e.meta
FROM venturi_event e
WHERE (e.xid, e.seq) > ((@after_xid::text)::xid8, @after_seq::bigint)
  AND e.xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY e.xid, e.seq
LIMIT @max::int;

-- name: EventsTail :one
-- A cursor before every event that a transaction still running, or a later one, writes.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xid;

-- name: EventsChannel :one
SELECT venturi_events_channel()::text AS channel;

-- name: PruneEvents :execrows
DELETE FROM venturi_event
WHERE (xid, seq) IN (
    SELECT xid, seq FROM venturi_event
    WHERE at < now() - interval '1 microsecond' * @age_us::bigint
    ORDER BY at
    LIMIT @max::int
);
