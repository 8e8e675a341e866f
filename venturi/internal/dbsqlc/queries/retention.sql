-- name: TryRetentionLock :one
-- The lock of retention (the history's partitions and sweep, events, idle gates, what gone
-- jobs left): one worker at a time does it. A partition drop or a sweep may wait for a
-- stats sample (they share-lock the stats state), so retention never shares the
-- maintenance lock or transaction with rescue.
SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '.venturi_retention', 0))::bool AS locked;

-- name: PruneIdleGates :one
-- Deletes the gates nothing uses any more among the next @max in key order after @after
-- (a sweep, by primary key): rate windows with no start inside their period, and breakers
-- that are closed or cooled down with no run of their kind (and partition) going, each
-- untouched for @idle_us. Forgetting such a gate changes no decision a claim makes but one:
-- a breaker's failures short of its threshold are forgotten with it. Runs after
-- LockGateStripes in the same transaction (rates are only written under those locks);
-- breaker rows are locked (a locked one is left for the next sweep) and checked again as
-- locked. Returns the gates scanned, the last key scanned and how many were deleted.
WITH scanned AS (
    SELECT g.key, g.kind, g.part, g.updated_at, g.open_until, g.probe_until, g.full_until
    FROM venturi_gate g
    WHERE g.key > @after::text
    ORDER BY g.key
    LIMIT @max::int
), idle AS (
    SELECT s.key FROM scanned s
    LEFT JOIN venturi_kind k ON k.kind = s.kind
    WHERE s.updated_at < now() - GREATEST(interval '1 microsecond' * @idle_us::bigint, COALESCE(k.rate_period, interval '0'))
      AND (s.full_until IS NULL OR s.full_until < now())
      AND (s.open_until IS NULL OR s.open_until < now())
      AND (s.probe_until IS NULL OR s.probe_until < now())
      AND (left(s.key, 1) <> 'b' OR NOT EXISTS (
          SELECT FROM venturi_job x
          WHERE x.state = 'running' AND x.part IS NOT NULL AND x.kind = s.kind
            AND (s.part IS NULL OR x.part = s.part)))
), locked AS (
    -- Checked again on the row as locked (a breaker recorded since the scan is not idle).
    SELECT g.key FROM venturi_gate g
    WHERE g.key = ANY(ARRAY(SELECT idle.key FROM idle))
      AND g.updated_at < now() - interval '1 microsecond' * @idle_us::bigint
    ORDER BY g.key
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM venturi_gate g
    WHERE g.key = ANY(ARRAY(SELECT locked.key FROM locked))
    RETURNING g.key
)
SELECT (SELECT count(*) FROM scanned)::int AS scanned,
       COALESCE((SELECT max(scanned.key) FROM scanned), '')::text AS last_key,
       (SELECT count(*) FROM gone)::int AS deleted;
