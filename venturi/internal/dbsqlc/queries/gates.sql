-- name: LockGateStripes :exec
-- Every gate stripe's lock, in stripe order, as the gated claim takes them (so no locker
-- waits in a cycle): held to the end of the transaction, after which no claim is between
-- reading a rate window and recording its starts. Run it as its own statement, so that the
-- next statement's snapshot sees every claim that held them before.
SELECT count(pg_advisory_xact_lock(hashtext(current_schema() || '.venturi_gate'), s))
FROM generate_series(0, 63) AS s;

-- name: SetKindLimits :one
-- Records a kind as a worker registers it, at start: its limits, what a dedup collision
-- of an enqueue from SQL may decide (merge: 'replace', 'keep' or 'go', with the due-time
-- rule) and whether it is a supervised singleton. It reports whether the kind had no
-- limits before, so that the caller can gate the kind's pending jobs that were enqueued as
-- plain ones. No row: nothing changed.
WITH old AS (SELECT k.limited FROM venturi_kind k WHERE k.kind = @kind::text)
INSERT INTO venturi_kind AS k (kind, concurrency, rate_n, rate_period, rate_by_part, brk_failures, brk_cooldown, brk_by_part,
                               merge, merge_due, merge_delay, merge_max_wait, singleton)
VALUES (@kind::text, @concurrency::int, @rate_n::int, interval '1 microsecond' * @rate_period_us::bigint, @rate_by_part::bool,
        @brk_failures::int, interval '1 microsecond' * @brk_cooldown_us::bigint, @brk_by_part::bool,
        @merge::text, @merge_due::smallint, interval '1 microsecond' * @merge_delay_us::bigint,
        interval '1 microsecond' * @merge_max_wait_us::bigint, @singleton::bool)
ON CONFLICT (kind) DO UPDATE SET
    concurrency = EXCLUDED.concurrency, rate_n = EXCLUDED.rate_n, rate_period = EXCLUDED.rate_period,
    rate_by_part = EXCLUDED.rate_by_part, brk_failures = EXCLUDED.brk_failures,
    brk_cooldown = EXCLUDED.brk_cooldown, brk_by_part = EXCLUDED.brk_by_part,
    merge = EXCLUDED.merge, merge_due = EXCLUDED.merge_due, merge_delay = EXCLUDED.merge_delay,
    merge_max_wait = EXCLUDED.merge_max_wait, singleton = EXCLUDED.singleton, updated_at = now()
WHERE (k.concurrency, k.rate_n, k.rate_period, k.rate_by_part, k.brk_failures, k.brk_cooldown, k.brk_by_part,
       k.merge, k.merge_due, k.merge_delay, k.merge_max_wait, k.singleton)
      IS DISTINCT FROM (EXCLUDED.concurrency, EXCLUDED.rate_n, EXCLUDED.rate_period, EXCLUDED.rate_by_part,
                        EXCLUDED.brk_failures, EXCLUDED.brk_cooldown, EXCLUDED.brk_by_part,
                        EXCLUDED.merge, EXCLUDED.merge_due, EXCLUDED.merge_delay, EXCLUDED.merge_max_wait,
                        EXCLUDED.singleton)
RETURNING NOT COALESCE((SELECT old.limited FROM old), false) AS newly_limited, k.limited;

-- name: GatePendingOfKind :execrows
-- Makes a kind's plain pending jobs gated, once the kind has limits. One pass over the
-- table: it runs when a kind's limits first appear, in the transaction that records them.
-- (Running ones are gated when they return to pending: see FinishRuns.) The available ones
-- take their places in the kind's one partition; the others do when they become available.
UPDATE venturi_job SET part = '', vt = CASE WHEN state = 'available' THEN venturi_job_place(queue, '', priority) END
WHERE kind = @kind::text AND part IS NULL AND state IN ('available', 'scheduled', 'waiting', 'blocked');

-- name: BreakerRecord :many
-- Reports run outcomes to their breakers, in the order given (sorted by key).
SELECT key::text AS key, kind::text AS kind, COALESCE(part, '')::text AS part, opened::bool AS opened,
       fails::int AS fails, COALESCE(open_until, 'epoch')::timestamptz AS open_until
FROM venturi_breaker_record(@keys::text[], @failed::bool[]);

-- name: ListCircuits :many
-- Every breaker with its state, for Queue.Circuits.
SELECT g.kind, g.part, g.fails, g.open_until, g.probe_until, g.updated_at,
       COALESCE(k.brk_failures, 0)::int AS threshold
FROM venturi_gate g LEFT JOIN venturi_kind k ON k.kind = g.kind
WHERE left(g.key, 1) = 'b'
ORDER BY g.kind, g.part NULLS FIRST;

-- name: ListCircuitsAfter :many
-- One page of the breakers for Queue.ListCircuits: those whose key comes after @after
-- (empty for the first page), at most @max, in key order (the letter b, the kind and the
-- partition joined by chr(31): by kind, a kind-wide breaker first, then by partition). A
-- range of the primary key: every breaker key sorts from 'b' to 'c' in any collation that
-- compares the first letter first; left(key, 1) keeps out any other key.
SELECT g.key, g.kind, g.part, g.fails, g.open_until, g.probe_until, g.updated_at,
       COALESCE(k.brk_failures, 0)::int AS threshold
FROM venturi_gate g LEFT JOIN venturi_kind k ON k.kind = g.kind
WHERE g.key > @after::text AND g.key >= 'b' AND g.key < 'c' AND left(g.key, 1) = 'b'
ORDER BY g.key
LIMIT @max::int;

-- name: ResetCircuit :one
-- Closes a breaker (its failures forgotten); the key is the one the kind's jobs of the
-- partition report to. Returns whether one was reset.
UPDATE venturi_gate g SET fails = 0, open_until = NULL, probe_until = NULL, updated_at = now()
FROM venturi_kind k
WHERE k.kind = @kind::text AND k.brk_failures > 0
  AND g.key = 'b' || chr(31) || k.kind || CASE WHEN k.brk_by_part THEN chr(31) || @part::text ELSE '' END
RETURNING g.key;
