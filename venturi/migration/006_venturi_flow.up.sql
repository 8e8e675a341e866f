-- venturi schema, version 6: flow control, enforced in the claim by the database.
--
-- * Queues are rows of venturi_queue: a paused queue starts no job (the claim checks it),
--   and a queue may cap how many of its jobs run at once across all workers.
-- * Kind limits (venturi_kind), written by the workers that register the kinds: a global
--   concurrency, a rate (N starts per period, optionally per partition) and a circuit
--   breaker (optionally per partition).
-- * A job may carry a partition (tenant, host) and a slot: at most slot_limit running jobs
--   share a slot key, and slot_policy says what a job does when it becomes runnable while
--   its slot is full (0 wait in order, 1 replace the running job, 2 drop itself).
--
-- A job that is subject to any of these ("gated") has a non-NULL part: its partition, ''
-- when it has none. Gated jobs are claimed by venturi_claim_gated through their own index,
-- round-robin between partitions, so one partition's flood cannot hold the others back
-- and a full slot is never walked over job by job. Plain jobs (part IS NULL) keep the
-- plain claim and pay for none of this.
--
-- How limits hold with any number of workers: every gated claim takes, in sorted order,
-- transaction-scoped advisory locks on the stripes (hash mod 64) of the gates it touches,
-- then counts the running jobs of each gate in a fresh snapshot. Running counts are read
-- from the job rows themselves, so a slot held by a killed worker is freed when the lease
-- rescue returns its job, and nothing can drift. Rate windows and breaker states, which
-- have no such rows, live in venturi_gate and are only written under the same locks (rates)
-- or in key order (breakers), so no two writers can deadlock.
--
-- Rolling deploy: apply before deploying workers of this version. Version-4 workers keep
-- claiming plain jobs correctly, but the claim index they walked is replaced (by one over
-- plain jobs only), so their claims sort; finish the rollout promptly. They would ignore
-- gates: deploy version-6 workers for a kind before producers that give its jobs a slot or
-- a partition, and before declaring its limits. Creating the two claim indexes takes a
-- write lock for as long as the build lasts (seconds per million rows); with a large table,
-- create them first with CREATE INDEX CONCURRENTLY under the same names.

ALTER TABLE venturi_job
    ADD COLUMN part text
        CONSTRAINT venturi_job_part_check CHECK (length(part) <= 256),
    ADD COLUMN slot_key text
        CONSTRAINT venturi_job_slot_key_check CHECK (slot_key <> '' AND length(slot_key) <= 256),
    ADD COLUMN slot_limit integer
        CONSTRAINT venturi_job_slot_limit_check CHECK (slot_limit >= 1),
    ADD COLUMN slot_policy smallint
        CONSTRAINT venturi_job_slot_policy_check CHECK (slot_policy BETWEEN 0 AND 2),
    -- The breaker this run reports its outcome to (set by the claim).
    ADD COLUMN breaker text,
    -- This run was asked to stop: by a newer job of its slot (stop_event 'replaced') or by
    -- Queue.Cancel ('cancelled'), with stop_note saying why. Whatever the run then reports
    -- short of completing, the job ends cancelled: the statements that end runs enforce it.
    ADD COLUMN stop_requested_at timestamptz,
    ADD COLUMN stop_event text
        CONSTRAINT venturi_job_stop_event_check CHECK (stop_event IN ('replaced', 'cancelled')),
    ADD COLUMN stop_note text,
    -- Queue.Await waits for this job: its end is notified on this channel.
    ADD COLUMN await_channel text,
    -- The signals a waiting job waits for (state 'waiting', until run_at).
    ADD COLUMN wait_signals text[],
    ADD CONSTRAINT venturi_job_slot_complete CHECK (
        (slot_key IS NULL) = (slot_limit IS NULL) AND (slot_key IS NULL) = (slot_policy IS NULL)
        AND (slot_key IS NULL OR part IS NOT NULL));

CREATE TABLE venturi_queue (
    name        text        PRIMARY KEY CHECK (name <> '' AND length(name) <= 128),
    paused      boolean     NOT NULL DEFAULT false,
    concurrency integer     NOT NULL DEFAULT 0 CHECK (concurrency >= 0), -- 0: no limit
    -- Round-robin cursor: with more partitions than one claim looks at, the next claim
    -- starts after this one.
    rr_after    text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE venturi_kind (
    kind         text        PRIMARY KEY,
    concurrency  integer     NOT NULL DEFAULT 0 CHECK (concurrency >= 0),  -- 0: no limit
    rate_n       integer     NOT NULL DEFAULT 0 CHECK (rate_n >= 0),       -- 0: no rate
    rate_period  interval    NOT NULL DEFAULT '1 second',
    rate_by_part boolean     NOT NULL DEFAULT false,
    brk_failures integer     NOT NULL DEFAULT 0 CHECK (brk_failures >= 0), -- 0: no breaker
    brk_cooldown interval    NOT NULL DEFAULT '30 seconds',
    brk_by_part  boolean     NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    limited      boolean     GENERATED ALWAYS AS (concurrency > 0 OR rate_n > 0 OR brk_failures > 0) STORED
);

-- State that running jobs cannot carry: rate windows ('r' keys) and breakers ('b' keys).
CREATE TABLE venturi_gate (
    key         text        PRIMARY KEY, -- type, kind and partition joined by chr(31)
    kind        text        NOT NULL,
    part        text,                    -- NULL: kind-wide
    rate_at     timestamptz[] NOT NULL DEFAULT '{}', -- starts admitted in the last period: when,
    rate_n      integer[]     NOT NULL DEFAULT '{}', -- and how many
    fails       integer     NOT NULL DEFAULT 0,      -- breaker: failures in a row
    open_until  timestamptz,                         -- breaker: open (no claims) until then
    probe_until timestamptz,                         -- breaker: a probe run is out until then
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS venturi_job_claim_plain_idx
    ON venturi_job (queue, priority DESC, run_at, id) WHERE state = 'available' AND part IS NULL;
CREATE INDEX IF NOT EXISTS venturi_job_claim_gated_idx
    ON venturi_job (queue, part, priority DESC, run_at, id) WHERE state = 'available' AND part IS NOT NULL;
DROP INDEX IF EXISTS venturi_job_claim_queue_idx;
-- Running counts of the gates (empty unless gated jobs run).
CREATE INDEX venturi_job_running_slot_idx ON venturi_job (slot_key) WHERE state = 'running' AND slot_key IS NOT NULL;
CREATE INDEX venturi_job_running_gated_idx ON venturi_job (kind) WHERE state = 'running' AND part IS NOT NULL;
-- Retention of cancelled jobs.
CREATE INDEX venturi_job_cancelled_idx ON venturi_job (finished_at) WHERE state = 'cancelled';

-- venturi_gate_lock takes the advisory locks of the given gate keys' stripes, in stripe
-- order: every writer of gate state goes through it, so lockers never wait in a cycle.
CREATE FUNCTION venturi_gate_lock(p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ns integer := hashtext(current_schema() || '.venturi_gate');
    s  integer;
BEGIN
    FOR s IN SELECT DISTINCT hashtext(k) & 63 FROM unnest(p_keys) AS k ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(ns, s);
    END LOOP;
END
$$;

-- venturi_gated_parts lists up to p_max partitions of p_queue that have available gated
-- jobs, in order, after p_after (from the first when NULL): a skip scan of the gated claim
-- index, one probe per partition.
CREATE FUNCTION venturi_gated_parts(p_queue text, p_after text, p_max integer) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
    r text[];
BEGIN
    -- Two copies of one scan: a condition that tested p_after for NULL would keep the
    -- anchor from seeking the index to p_after.
    IF p_after IS NULL THEN
        WITH RECURSIVE ps(p, n) AS (
            (SELECT x.part, 1 FROM venturi_job x
             WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue
             ORDER BY x.part LIMIT 1)
            UNION ALL
            SELECT (SELECT x.part FROM venturi_job x
                    WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue AND x.part > ps.p
                    ORDER BY x.part LIMIT 1), ps.n + 1
            FROM ps WHERE ps.p IS NOT NULL AND ps.n < p_max
        )
        SELECT array_agg(ps.p ORDER BY ps.n) INTO r FROM ps WHERE ps.p IS NOT NULL;
    ELSE
        WITH RECURSIVE ps(p, n) AS (
            (SELECT x.part, 1 FROM venturi_job x
             WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue AND x.part > p_after
             ORDER BY x.part LIMIT 1)
            UNION ALL
            SELECT (SELECT x.part FROM venturi_job x
                    WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue AND x.part > ps.p
                    ORDER BY x.part LIMIT 1), ps.n + 1
            FROM ps WHERE ps.p IS NOT NULL AND ps.n < p_max
        )
        SELECT array_agg(ps.p ORDER BY ps.n) INTO r FROM ps WHERE ps.p IS NOT NULL;
    END IF;
    RETURN COALESCE(r, '{}');
END
$$;

-- venturi_claim_gated claims up to p_max gated jobs of p_kinds from p_queue (and, when
-- the queue has a concurrency limit, its plain jobs too), admitting each only while every
-- gate it is subject to has room. It returns nothing while the queue is paused.
--
-- Candidates: each partition's most urgent jobs, taken round-robin (the first job of
-- every partition, most urgent first, then the second...). Gates per candidate: its slot
-- (s), its kind's concurrency (k), the queue's concurrency (q), its kind's rate (r) and
-- breaker (b), the last two per partition when the kind says so.
--
-- When a rate or an open breaker held jobs back, one more row, with a NULL id, says in
-- wake_in_us when the first of them may run: the worker looks again then instead of at its
-- next poll. (Slots and concurrency limits free when runs end, which wakes the workers.)
CREATE FUNCTION venturi_claim_gated(
    p_queue text, p_kinds text[], p_max integer, p_lease_us bigint, p_worker text,
    p_max_failures integer, p_channel text)
RETURNS TABLE (id uuid, kind text, payload jsonb, carry jsonb, runs integer, failures integer,
               lease_token bigint, journal jsonb, journal_moved bigint, attempted_at timestamptz,
               breaker text, wake_in_us bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    sep     CONSTANT text := chr(31);
    v_paused boolean;
    v_qconc integer;
    v_now   timestamptz; -- the admitted runs' start
    v_check timestamptz; -- when the gates were checked
    v_parts text[];
    v_after text;
    max_parts CONSTANT integer := 1000; -- partitions one claim looks at
    v_k     integer;
    -- candidates, in admission order
    c_id     uuid[];
    c_slot   text[];
    c_part   text[];
    v_last   text; -- the partition of the last job admitted
    c_limit  integer[];
    c_policy smallint[];
    c_g      integer[]; -- five gate indexes per candidate (0: none), flattened
    -- gates
    g_key   text[];
    g_used  integer[];
    g_cap   integer[];
    g_slot  boolean[];
    n       integer;
    i       integer;
    j       integer;
    g       integer;
    ok      boolean;
    slot_full boolean;
    admit   uuid[] := '{}';
    admit_g integer[] := '{}';
    blocked_g integer[] := '{}'; -- rate and breaker gates that held a candidate back
    v_wake  timestamptz;
    dropped uuid[] := '{}';
    drop_note text[] := '{}';
    replace_slots text[] := '{}';
    r       record;
BEGIN
    SELECT vq.paused, vq.concurrency, vq.rr_after INTO v_paused, v_qconc, v_after FROM venturi_queue vq WHERE vq.name = p_queue;
    IF v_paused THEN
        RETURN;
    END IF;
    v_qconc := COALESCE(v_qconc, 0);
    IF v_qconc = 0 AND NOT EXISTS (
        SELECT 1 FROM venturi_job x
        WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue AND x.kind = ANY(p_kinds)) THEN
        RETURN;
    END IF;

    -- The partitions with available gated jobs, at most max_parts of them, in round-robin
    -- order: after the queue's cursor (the partition served last), wrapping around.
    v_parts := venturi_gated_parts(p_queue, v_after, max_parts);
    IF v_after IS NOT NULL AND cardinality(v_parts) < max_parts THEN
        v_parts := v_parts || ARRAY(
            SELECT w.p FROM unnest(venturi_gated_parts(p_queue, NULL, max_parts - cardinality(v_parts))) AS w(p)
            WHERE w.p <= v_after);
    END IF;
    v_k := GREATEST(1, ceil(p_max::numeric / GREATEST(cardinality(v_parts), 1))::integer);

    -- Candidates, locked: up to v_k per partition, round-robin; then, with a queue limit,
    -- the queue's plain jobs (the queue's gate alone applies to them).
    WITH gated AS (
        SELECT y.*, pp.pos, row_number() OVER (PARTITION BY y.part ORDER BY y.priority DESC, y.run_at, y.id) AS rn
        FROM unnest(v_parts) WITH ORDINALITY AS pp(p, pos),
        LATERAL (
            SELECT x.id, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.run_at
            FROM venturi_job x
            WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue AND x.part = pp.p
              AND x.kind = ANY(p_kinds)
            ORDER BY x.priority DESC, x.run_at, x.id
            LIMIT v_k
            FOR UPDATE SKIP LOCKED
        ) y
    ), plain AS (
        SELECT x.id, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.run_at
        FROM venturi_job x
        WHERE v_qconc > 0 AND x.state = 'available' AND x.part IS NULL AND x.queue = p_queue
          AND x.kind = ANY(p_kinds)
        ORDER BY x.priority DESC, x.run_at, x.id
        LIMIT LEAST(p_max, v_qconc)
        FOR UPDATE SKIP LOCKED
    ), cand AS (
        -- Round by round: each partition's first job, in partition order from the cursor,
        -- then each one's second... A limited queue's plain jobs go first in each round.
        SELECT c.*, row_number() OVER (ORDER BY c.rn, c.pos, c.priority DESC, c.run_at, c.id) AS ord
        FROM (SELECT gated.id, gated.kind, gated.part, gated.slot_key, gated.slot_limit, gated.slot_policy,
                     gated.priority, gated.run_at, gated.rn, gated.pos FROM gated
              UNION ALL
              SELECT plain.id, plain.kind, plain.part, plain.slot_key, plain.slot_limit, plain.slot_policy,
                     plain.priority, plain.run_at,
                     row_number() OVER (ORDER BY plain.priority DESC, plain.run_at, plain.id), 0 FROM plain) c
    ), gk AS (
        -- Each candidate's gates: (candidate order, position 1..5, key, slot?).
        SELECT cand.ord, 1 AS pos, 's' || sep || cand.slot_key AS key
        FROM cand WHERE cand.slot_key IS NOT NULL
        UNION ALL
        SELECT cand.ord, 2, 'k' || sep || cand.kind
        FROM cand JOIN venturi_kind k ON k.kind = cand.kind WHERE k.concurrency > 0
        UNION ALL
        SELECT cand.ord, 3, 'q' || sep || p_queue FROM cand WHERE v_qconc > 0
        UNION ALL
        SELECT cand.ord, 4, 'r' || sep || cand.kind || CASE WHEN k.rate_by_part THEN sep || COALESCE(cand.part, '') ELSE '' END
        FROM cand JOIN venturi_kind k ON k.kind = cand.kind WHERE k.rate_n > 0
        UNION ALL
        SELECT cand.ord, 5, 'b' || sep || cand.kind || CASE WHEN k.brk_by_part THEN sep || COALESCE(cand.part, '') ELSE '' END
        FROM cand JOIN venturi_kind k ON k.kind = cand.kind WHERE k.brk_failures > 0
    ), keys AS (
        SELECT d.key, row_number() OVER (ORDER BY d.key)::integer AS gi FROM (SELECT DISTINCT gk.key FROM gk) d
    )
    SELECT
        (SELECT array_agg(cand.id ORDER BY cand.ord) FROM cand),
        (SELECT array_agg(cand.slot_key ORDER BY cand.ord) FROM cand),
        (SELECT array_agg(cand.part ORDER BY cand.ord) FROM cand),
        (SELECT array_agg(cand.slot_limit ORDER BY cand.ord) FROM cand),
        (SELECT array_agg(cand.slot_policy ORDER BY cand.ord) FROM cand),
        (SELECT array_agg(COALESCE(keys.gi, 0) ORDER BY cand.ord, pos.n)
         FROM cand CROSS JOIN generate_series(1, 5) AS pos(n)
         LEFT JOIN gk ON gk.ord = cand.ord AND gk.pos = pos.n
         LEFT JOIN keys ON keys.key = gk.key),
        (SELECT array_agg(keys.key ORDER BY keys.gi) FROM keys)
    INTO c_id, c_slot, c_part, c_limit, c_policy, c_g, g_key;

    n := COALESCE(cardinality(c_id), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    g_key := COALESCE(g_key, '{}');

    -- Lock the gates, then read their state in a fresh snapshot: every claim that held
    -- these locks before has committed, and its running jobs are visible.
    PERFORM venturi_gate_lock(g_key);
    v_check := clock_timestamp();
    INSERT INTO venturi_gate (key, kind, part)
    SELECT gkey, split_part(gkey, sep, 2), NULLIF(split_part(gkey, sep, 3), '')
    FROM unnest(g_key) AS gkey WHERE left(gkey, 1) IN ('r', 'b')
    ON CONFLICT DO NOTHING;

    -- Each gate's use and capacity. Running counts come from the job rows (one grouped
    -- index scan per gate type); rate windows and breakers from venturi_gate.
    WITH slot_used AS (
        SELECT x.slot_key AS s, count(*)::integer AS n
        FROM venturi_job x
        WHERE x.state = 'running' AND x.slot_key IS NOT NULL
          AND x.slot_key = ANY(ARRAY(SELECT substr(k, 3) FROM unnest(g_key) AS k WHERE left(k, 1) = 's'))
        GROUP BY x.slot_key
    ), kind_used AS (
        -- Every running job of the kind, plain ones too: a job claimed as plain before the
        -- kind's limits were recorded (or by a worker of version 4) still runs.
        SELECT x.kind AS s, count(*)::integer AS n
        FROM venturi_job x
        WHERE x.state = 'running'
          AND x.kind = ANY(ARRAY(SELECT substr(k, 3) FROM unnest(g_key) AS k WHERE left(k, 1) = 'k'))
        GROUP BY x.kind
    ), queue_used AS (
        SELECT count(*)::integer AS n
        FROM venturi_job x
        WHERE v_qconc > 0 AND x.state = 'running' AND x.queue = p_queue
    )
    SELECT array_agg(CASE t.typ
                         WHEN 's' THEN COALESCE(su.n, 0)
                         WHEN 'k' THEN COALESCE(ku.n, 0)
                         WHEN 'q' THEN (SELECT queue_used.n FROM queue_used)
                         WHEN 'r' THEN COALESCE((SELECT sum(w.c) FROM unnest(gt.rate_at, gt.rate_n) AS w(at, c)
                                                 WHERE w.at > v_check - k.rate_period), 0)::integer
                         ELSE 0 END ORDER BY gs.gi),
           array_agg(CASE t.typ
                         WHEN 's' THEN 2147483647 -- each candidate's own slot limit applies
                         WHEN 'k' THEN COALESCE((SELECT kk.concurrency FROM venturi_kind kk WHERE kk.kind = substr(gs.key, 3)), 2147483647)
                         WHEN 'q' THEN v_qconc
                         WHEN 'r' THEN COALESCE(k.rate_n, 2147483647)
                         WHEN 'b' THEN CASE WHEN gt.open_until IS NULL THEN 2147483647
                                            WHEN gt.open_until > v_check THEN 0
                                            WHEN gt.probe_until IS NOT NULL AND gt.probe_until > v_check THEN 0
                                            ELSE 1 END
                         ELSE 2147483647 END ORDER BY gs.gi),
           array_agg(t.typ = 's' ORDER BY gs.gi)
    INTO g_used, g_cap, g_slot
    FROM unnest(g_key) WITH ORDINALITY AS gs(key, gi)
    CROSS JOIN LATERAL (SELECT left(gs.key, 1) AS typ) t
    LEFT JOIN slot_used su ON t.typ = 's' AND su.s = substr(gs.key, 3)
    LEFT JOIN kind_used ku ON t.typ = 'k' AND ku.s = substr(gs.key, 3)
    LEFT JOIN venturi_gate gt ON t.typ IN ('r', 'b') AND gt.key = gs.key
    LEFT JOIN venturi_kind k ON t.typ = 'r' AND k.kind = gt.kind;
    -- The admitted runs start now: after the snapshot that counted the running jobs, so a
    -- run that ended just before it has ended before this, by the database clock, and
    -- journals never show more runs at once than a gate allows.
    v_now := clock_timestamp();

    -- Admit in order: a candidate runs when each of its gates has room. A full slot is
    -- handled by the candidate's policy.
    FOR i IN 1..n LOOP
        EXIT WHEN cardinality(admit) >= p_max;
        ok := true;
        slot_full := false;
        FOR j IN 1..5 LOOP
            g := c_g[(i - 1) * 5 + j];
            CONTINUE WHEN g = 0;
            IF g_slot[g] THEN
                IF g_used[g] >= c_limit[i] THEN
                    ok := false;
                    slot_full := true;
                END IF;
            ELSIF g_used[g] >= g_cap[g] THEN
                ok := false;
                IF left(g_key[g], 1) IN ('r', 'b') THEN
                    blocked_g := blocked_g || g;
                END IF;
            END IF;
        END LOOP;
        IF ok THEN
            admit := admit || c_id[i];
            v_last := COALESCE(c_part[i], v_last);
            FOR j IN 1..5 LOOP
                g := c_g[(i - 1) * 5 + j];
                IF g > 0 THEN
                    g_used[g] := g_used[g] + 1;
                    admit_g := admit_g || g;
                END IF;
            END LOOP;
        ELSIF slot_full AND c_policy[i] = 2 THEN
            dropped := dropped || c_id[i];
            drop_note := drop_note || format('dropped: slot %s is full (%s of %s running; policy DropIfRunning)',
                                              c_slot[i], g_used[c_g[(i - 1) * 5 + 1]], c_limit[i]);
        ELSIF slot_full AND c_policy[i] = 1 AND NOT c_slot[i] = ANY(replace_slots) THEN
            replace_slots := replace_slots || c_slot[i];
        END IF;
    END LOOP;

    IF cardinality(dropped) > 0 THEN
        UPDATE venturi_job x SET
            state = 'cancelled', finished_at = v_now,
            journal = x.journal || jsonb_build_array(jsonb_build_object(
                'event', 'dropped', 'note', d.note, 'at', v_now))
        FROM unnest(dropped, drop_note) AS d(id, note)
        WHERE x.id = d.id;
    END IF;

    -- Replace: ask the oldest running job of each full slot to stop, unless one already is
    -- stopping. A locked row is skipped (it is finishing, or another claim asks it).
    IF cardinality(replace_slots) > 0 THEN
        FOR r IN
            UPDATE venturi_job x SET stop_requested_at = v_now, stop_event = 'replaced',
                stop_note = 'replaced by a newer job of slot ' || x.slot_key
            WHERE x.id IN (
                SELECT (SELECT h.id FROM venturi_job h
                        WHERE h.state = 'running' AND h.slot_key = rs.s AND h.stop_requested_at IS NULL
                        ORDER BY h.attempted_at, h.id LIMIT 1 FOR UPDATE SKIP LOCKED)
                FROM unnest(replace_slots) AS rs(s)
                WHERE NOT EXISTS (SELECT 1 FROM venturi_job h2
                                  WHERE h2.state = 'running' AND h2.slot_key = rs.s AND h2.stop_requested_at IS NOT NULL))
            RETURNING x.id
        LOOP
            PERFORM pg_notify(p_channel, chr(31) || 'stop:replaced:' || r.id::text);
        END LOOP;
    END IF;

    IF cardinality(blocked_g) > 0 THEN
        SELECT min(w.at) INTO v_wake FROM (
            SELECT COALESCE((SELECT min(t.at) FROM unnest(gt.rate_at) AS t(at) WHERE t.at > v_check - k.rate_period),
                            v_now) + k.rate_period AS at
            FROM venturi_gate gt JOIN venturi_kind k ON k.kind = gt.kind
            WHERE gt.key = ANY(ARRAY(SELECT g_key[b] FROM unnest(blocked_g) AS b WHERE left(g_key[b], 1) = 'r'))
            UNION ALL
            SELECT CASE WHEN gt.open_until > v_check THEN gt.open_until ELSE gt.probe_until END
            FROM venturi_gate gt
            WHERE gt.key = ANY(ARRAY(SELECT g_key[b] FROM unnest(blocked_g) AS b WHERE left(g_key[b], 1) = 'b'))
        ) w;
    END IF;

    IF cardinality(admit) = 0 THEN
        IF v_wake IS NOT NULL THEN
            RETURN QUERY SELECT NULL::uuid, ''::text, NULL::jsonb, NULL::jsonb, 0, 0, 0::bigint, NULL::jsonb, 0::bigint,
                v_now, NULL::text, GREATEST((EXTRACT(EPOCH FROM v_wake - clock_timestamp()) * 1000000)::bigint, 0);
        END IF;
        RETURN;
    END IF;

    -- Rates: record the starts admitted now; forget those older than the period.
    UPDATE venturi_gate gt SET
        rate_at = a.kept_at || v_now,
        rate_n  = a.kept_n || a.admitted,
        updated_at = v_now
    FROM (
        SELECT g_key[ag] AS key, count(*)::integer AS admitted,
               COALESCE((SELECT array_agg(t.at ORDER BY t.at) FROM venturi_gate g2, venturi_kind k,
                         unnest(g2.rate_at, g2.rate_n) AS t(at, c)
                         WHERE g2.key = g_key[ag] AND k.kind = g2.kind AND t.at > v_now - k.rate_period), '{}') AS kept_at,
               COALESCE((SELECT array_agg(t.c ORDER BY t.at) FROM venturi_gate g2, venturi_kind k,
                         unnest(g2.rate_at, g2.rate_n) AS t(at, c)
                         WHERE g2.key = g_key[ag] AND k.kind = g2.kind AND t.at > v_now - k.rate_period), '{}') AS kept_n
        FROM unnest(admit_g) AS ag
        WHERE left(g_key[ag], 1) = 'r'
        GROUP BY ag
    ) a
    WHERE gt.key = a.key;

    -- Breakers: a half-open breaker that admitted its probe waits for it. Breaker rows are
    -- locked in key order, as venturi_breaker_record locks them.
    UPDATE venturi_gate gt SET probe_until = v_now + interval '1 microsecond' * p_lease_us, updated_at = v_now
    WHERE gt.key IN (SELECT b.key FROM venturi_gate b
                     WHERE b.key IN (SELECT g_key[ag] FROM unnest(admit_g) AS ag WHERE left(g_key[ag], 1) = 'b')
                       AND b.open_until IS NOT NULL AND b.open_until <= v_now
                     ORDER BY b.key FOR UPDATE)
      AND gt.open_until IS NOT NULL AND gt.open_until <= v_now;

    -- The next claim starts after the partition served last. The queue's row stays locked
    -- until the claim commits; nothing after this waits for a lock.
    IF v_last IS DISTINCT FROM v_after THEN
        INSERT INTO venturi_queue AS vq (name, rr_after) VALUES (p_queue, v_last)
        ON CONFLICT (name) DO UPDATE SET rr_after = EXCLUDED.rr_after;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE venturi_job x SET
            state            = 'running',
            runs             = x.runs + 1,
            lease_token      = nextval('venturi_lease_token_seq'),
            lease_expires_at = v_now + interval '1 microsecond' * p_lease_us,
            worker_id        = p_worker,
            attempted_at     = v_now,
            max_failures     = p_max_failures,
            breaker = (SELECT 'b' || sep || x.kind || CASE WHEN k.brk_by_part THEN sep || COALESCE(x.part, '') ELSE '' END
                       FROM venturi_kind k WHERE k.kind = x.kind AND k.brk_failures > 0)
        WHERE x.id = ANY(admit)
        RETURNING x.id, x.kind, x.payload, x.carry, x.runs, x.failures, x.lease_token, x.journal,
                  x.journal_moved, x.attempted_at, x.breaker, x.priority, x.run_at
    )
    SELECT c.id, c.kind, c.payload, c.carry, c.runs, c.failures, c.lease_token, c.journal,
           c.journal_moved, c.attempted_at, c.breaker, NULL::bigint
    FROM claimed c JOIN unnest(admit) WITH ORDINALITY AS a(id, o) ON a.id = c.id
    ORDER BY a.o;
    IF v_wake IS NOT NULL THEN
        RETURN QUERY SELECT NULL::uuid, ''::text, NULL::jsonb, NULL::jsonb, 0, 0, 0::bigint, NULL::jsonb, 0::bigint,
            v_now, NULL::text, GREATEST((EXTRACT(EPOCH FROM v_wake - clock_timestamp()) * 1000000)::bigint, 0);
    END IF;
END
$$;

-- venturi_breaker_record reports run outcomes to their breakers, in the order given
-- (callers sort by key: rows are locked in that order). A success closes the breaker; a
-- failure counts, and opens it for the kind's cooldown when the count reaches the kind's
-- threshold, or at once when the failed run was the probe of a half-open breaker. It
-- returns the breakers that opened or closed.
CREATE FUNCTION venturi_breaker_record(p_keys text[], p_failed boolean[])
RETURNS TABLE (key text, kind text, part text, opened boolean, fails integer, open_until timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    i integer;
    g venturi_gate%ROWTYPE;
    k venturi_kind%ROWTYPE;
BEGIN
    FOR i IN 1..COALESCE(cardinality(p_keys), 0) LOOP
        SELECT * INTO g FROM venturi_gate gt WHERE gt.key = p_keys[i] FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        SELECT * INTO k FROM venturi_kind kk WHERE kk.kind = g.kind;
        IF NOT p_failed[i] THEN
            UPDATE venturi_gate gt SET fails = 0, open_until = NULL, probe_until = NULL, updated_at = now()
            WHERE gt.key = g.key;
            IF g.open_until IS NOT NULL THEN
                RETURN QUERY SELECT g.key, g.kind, g.part, false, 0, NULL::timestamptz;
            END IF;
        ELSIF g.open_until IS NULL AND g.fails + 1 >= GREATEST(COALESCE(k.brk_failures, 0), 1)
              OR g.open_until IS NOT NULL AND g.open_until <= clock_timestamp() THEN
            UPDATE venturi_gate gt SET fails = g.fails + 1, probe_until = NULL,
                open_until = clock_timestamp() + COALESCE(k.brk_cooldown, interval '30 seconds'), updated_at = now()
            WHERE gt.key = g.key
            RETURNING gt.open_until INTO g.open_until;
            RETURN QUERY SELECT g.key, g.kind, g.part, true, g.fails + 1, g.open_until;
        ELSE
            UPDATE venturi_gate gt SET fails = g.fails + 1, updated_at = now() WHERE gt.key = g.key;
        END IF;
    END LOOP;
END
$$;

-- Queue.Await: the end of an awaited job is notified to its waiters' channel, whoever ends
-- it (a run, a cancel, a rescue, a slot policy). Jobs nobody awaits cost the WHEN test.
CREATE FUNCTION venturi_job_done() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(NEW.await_channel, chr(31) || 'done:' || NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER venturi_job_done
    AFTER UPDATE OF state ON venturi_job
    FOR EACH ROW WHEN (NEW.await_channel IS NOT NULL AND NEW.state IN ('completed', 'dead', 'cancelled')
                       AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION venturi_job_done();

-- Signals (Queue.Signal): kept until a run of their job reads them and ends; a waiting job
-- is woken by the first one it waits for. A delivery ID makes a retried send a no-op.
CREATE TABLE venturi_signal (
    job_id         uuid        NOT NULL, -- deleted with its job (venturi_job_extras_delete)
    seq            bigint      GENERATED ALWAYS AS IDENTITY,
    name           text        NOT NULL CHECK (name <> '' AND length(name) <= 128),
    payload        jsonb       NOT NULL,
    delivery_id    text        NOT NULL CHECK (length(delivery_id) <= 256),
    sent_at        timestamptz NOT NULL DEFAULT now(),
    consumed_token bigint,     -- the run that read it and ended
    consumed_at    timestamptz,
    PRIMARY KEY (job_id, seq),
    UNIQUE (job_id, delivery_id)
);

-- Timeouts of waiting jobs.
CREATE INDEX venturi_job_waiting_idx ON venturi_job (run_at) WHERE state = 'waiting';

-- Hooks (Run.CreateHook): a secret token that resumes a job with a signal. Only the
-- token's SHA-256 is stored: the token is the capability.
CREATE TABLE venturi_hook (
    token_hash  bytea       PRIMARY KEY,
    job_id      uuid        NOT NULL, -- deleted with its job (venturi_job_extras_delete)
    name        text        NOT NULL, -- the signal it sends
    reusable    boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    disposed_at timestamptz
);
CREATE INDEX venturi_hook_job_idx ON venturi_hook (job_id);

-- Memoized steps (venturi.Step): a step's result, written by the run that completed it
-- (fenced by its token), read instead of running the step again by later runs.
CREATE TABLE venturi_step (
    job_id uuid        NOT NULL, -- deleted with its job (venturi_job_extras_delete)
    name   text        NOT NULL CHECK (name <> '' AND length(name) <= 128),
    result jsonb       NOT NULL,
    run    integer     NOT NULL, -- the run that completed it
    token  bigint      NOT NULL,
    at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, name)
);

-- A job's signals, hooks and steps go with it, whoever deletes it. Not foreign keys: their
-- triggers would run for every update of every job; this one runs once per DELETE
-- statement (retention deletes in batches).
CREATE FUNCTION venturi_job_extras_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Arrays, not joins: the planner knows nothing of the transition table's size.
    DELETE FROM venturi_signal s WHERE s.job_id = ANY(ARRAY(SELECT gone.id FROM gone));
    DELETE FROM venturi_hook h WHERE h.job_id = ANY(ARRAY(SELECT gone.id FROM gone));
    DELETE FROM venturi_step p WHERE p.job_id = ANY(ARRAY(SELECT gone.id FROM gone));
    RETURN NULL;
END
$$;

CREATE TRIGGER venturi_job_extras_delete
    AFTER DELETE ON venturi_job
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION venturi_job_extras_delete();
