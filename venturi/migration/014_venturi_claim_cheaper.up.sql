-- venturi schema, version 14: a cheaper gated claim: its slots' running jobs looked up in a
-- map, a wrapped skip scan that stops at the cursor, breaker keys without a probe per row.
-- Functions only; no table changes.
--
-- venturi_claim_gated (migration 12) is replaced by a version with the same arguments,
-- admission and results, whose statements cost less. First, migration 12 counted the
-- running jobs of every slot in one grouped pass and joined the claim's slot keys to it;
-- the planner, whose statistics usually see few running jobs, joined the two with a
-- nested loop that compared every key of the claim with every running slot: with 569
-- slots in a claim and 395 running, 224,763 comparisons, a quarter of the claim's time
-- (auto_explain in the flow bench's slots variant, bench/FINDINGS.md section 9). A probe
-- per slot key fares no better: the planner scans venturi_job_lease_idx (every running
-- job) for each key, as its estimates price both indexes alike. The running slot jobs are
-- now counted once per claim into a jsonb map (slot key -> count), in which each of the
-- claim's slots is looked up: the cost is one pass over the running slot jobs plus a
-- lookup per slot, with no join for a plan to get wrong.
--
-- Two more statements cost less:
-- * When the round-robin cursor wraps (fewer partitions after it than the claim visits),
--   the second skip scan stops at the cursor (venturi_gated_heads_upto) instead of going
--   on through the partitions the first scan visited: with 100 partitions and claims of a
--   few hundred jobs, every claim wrapped and walked each partition's index twice.
-- * The claimed rows' breaker keys come from a map of the worker's kinds read once per
--   claim, not from a probe of venturi_kind per row.
--
-- Rolling deploy: the function keeps its arguments and result columns, so workers of
-- versions 12 and 13 keep working and get the cheaper count at once; it is replaced in the
-- migration's transaction (a claim runs either the old body or the new one). This version's
-- workers need nothing more than migration 12's function.

-- venturi_gated_heads_upto is venturi_gated_heads (migration 7) from the first partition up
-- to p_upto (inclusive): the part of a wrapped round-robin pass before the cursor.
CREATE FUNCTION venturi_gated_heads_upto(p_queue text, p_upto text, p_max integer, OUT parts text[], OUT ids uuid[])
LANGUAGE plpgsql
SET jit = off
AS $$
BEGIN
    WITH RECURSIVE ps(p, id, n) AS (
        (SELECT x.part, x.id, 1 FROM venturi_job x
         WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue AND x.part <= p_upto
         ORDER BY x.part, x.priority DESC, x.run_at, x.id LIMIT 1)
        UNION ALL
        SELECT nx.part, nx.id, ps.n + 1
        FROM ps CROSS JOIN LATERAL (
            SELECT x.part, x.id FROM venturi_job x
            WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue AND x.part > ps.p
              AND x.part <= p_upto
            ORDER BY x.part, x.priority DESC, x.run_at, x.id LIMIT 1) nx
        WHERE ps.n < p_max
    )
    SELECT array_agg(ps.p ORDER BY ps.n), array_agg(ps.id ORDER BY ps.n) INTO parts, ids FROM ps;
    parts := COALESCE(parts, '{}');
    ids := COALESCE(ids, '{}');
END
$$;

CREATE OR REPLACE FUNCTION venturi_claim_gated(
    p_queue text, p_kinds text[], p_max integer, p_lease_us bigint, p_worker text,
    p_max_failures integer, p_channel text)
RETURNS TABLE (id uuid, kind text, payload jsonb, carry jsonb, runs integer, failures integer,
               lease_token bigint, journal jsonb, journal_moved bigint, attempted_at timestamptz,
               breaker text, wake_in_us bigint, meta jsonb, run_at timestamptz)
LANGUAGE plpgsql
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    sep     CONSTANT text := chr(31);
    v_paused boolean;
    v_qconc integer;
    v_now   timestamptz; -- the admitted runs' start
    v_check timestamptz; -- when the gates were checked
    v_parts text[];
    v_heads uuid[]; -- each partition's most urgent job
    v_more  text[];
    v_mh    uuid[];
    v_after text;
    max_parts CONSTANT integer := 1000; -- partitions one claim looks at, at most
    v_maxp  integer; -- partitions this claim looks at
    v_probe text;
    v_k     integer;
    v_full  boolean := false; -- the claim stopped at p_max before the last candidate
    -- candidates, in admission order
    c_id     uuid[];
    c_slot   text[];
    c_part   text[];
    v_last   text; -- the partition of the last job admitted
    c_limit  integer[];
    c_policy smallint[];
    c_off    integer[]; -- candidate i's gates are c_gl[c_off[i] .. c_off[i + 1] - 1]
    c_gl     integer[]; -- gate indexes, flattened
    n_admit  integer := 0;
    -- gates
    g_key   text[];
    g_used  integer[];
    g_cap   integer[];
    g_slot  boolean[];
    g_rb    boolean[]; -- a rate or a breaker
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
    v_slot_used jsonb := '{}'; -- slot key -> its running jobs
    v_brk   jsonb; -- kind -> its breaker is per partition, for the worker's kinds with one
BEGIN
    SELECT vq.paused, vq.concurrency, vq.rr_after INTO v_paused, v_qconc, v_after FROM venturi_queue vq WHERE vq.name = p_queue;
    IF v_paused THEN
        RETURN;
    END IF;
    v_qconc := COALESCE(v_qconc, 0);
    -- Nothing gated is available: done. The first entry of the gated claim index, read in
    -- its order (as an EXISTS, the planner would be free to scan the table instead).
    IF v_qconc = 0 THEN
        SELECT x.part INTO v_probe FROM venturi_job x
        WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue
        ORDER BY x.part LIMIT 1;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;

    -- The partitions with available gated jobs, in round-robin order: after the queue's
    -- cursor (the partition served last), wrapping around. As many as the jobs asked for
    -- and 16 more (some may be held back by their gates), at least 32, at most max_parts:
    -- a claim locks one candidate per partition it visits at least, and a claim that
    -- visited partitions it could not use moves the cursor past them.
    v_maxp := LEAST(max_parts, GREATEST(p_max + 16, 32));
    SELECT h.parts, h.ids INTO v_parts, v_heads FROM venturi_gated_heads(p_queue, v_after, v_maxp) h;
    IF v_after IS NOT NULL AND cardinality(v_parts) < v_maxp THEN
        -- From the first partition up to the cursor only (migration 14): the scan used to
        -- go on past it through partitions the first scan had already visited.
        SELECT h.parts, h.ids INTO v_more, v_mh FROM venturi_gated_heads_upto(p_queue, v_after, v_maxp - cardinality(v_parts)) h;
        FOR i IN 1..cardinality(v_more) LOOP
            EXIT WHEN v_more[i] > v_after;
            v_parts := v_parts || v_more[i];
            v_heads := v_heads || v_mh[i];
        END LOOP;
    END IF;
    v_k := GREATEST(1, ceil(p_max::numeric / GREATEST(cardinality(v_parts), 1))::integer);

    -- Candidates, locked: up to v_k per partition, round-robin; then, with a queue limit,
    -- the queue's plain jobs (the queue's gate alone applies to them). With one per
    -- partition, the candidates are the partitions' heads the skip scan found, locked by
    -- primary key; a partition whose head another claim holds, or whose head is of a kind
    -- this worker does not serve, is probed for its next job.
    WITH heads AS (
        SELECT x.id, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.run_at
        FROM venturi_job x
        WHERE v_k = 1 AND x.id = ANY(ARRAY(SELECT unnest(v_heads))) AND x.state = 'available' AND x.part IS NOT NULL
          AND x.queue = p_queue AND x.kind = ANY(p_kinds)
        FOR UPDATE SKIP LOCKED
    ), parts AS (
        SELECT pp.p, pp.hid, pp.pos FROM unnest(v_parts, v_heads) WITH ORDINALITY AS pp(p, hid, pos)
    ), gated AS (
        SELECT heads.*, parts.pos, 1::bigint AS rn
        FROM parts JOIN heads ON heads.id = parts.hid
        UNION ALL
        SELECT y.*, parts.pos, row_number() OVER (PARTITION BY y.part ORDER BY y.priority DESC, y.run_at, y.id)
        FROM parts,
        LATERAL (
            SELECT x.id, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.run_at
            FROM venturi_job x
            WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue AND x.part = parts.p
              AND x.kind = ANY(p_kinds)
            ORDER BY x.priority DESC, x.run_at, x.id
            LIMIT v_k
            FOR UPDATE SKIP LOCKED
        ) y
        WHERE v_k > 1 OR NOT EXISTS (SELECT 1 FROM heads WHERE heads.id = parts.hid)
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
    ), ck AS (
        -- Each candidate's gate keys (NULL: not subject to it) and how many it has.
        SELECT cand.ord, cand.id, cand.slot_key, cand.part, cand.slot_limit, cand.slot_policy, g.*,
               (g.g1 IS NOT NULL)::integer + (g.g2 IS NOT NULL)::integer + (g.g3 IS NOT NULL)::integer
               + (g.g4 IS NOT NULL)::integer + (g.g5 IS NOT NULL)::integer AS ng
        FROM cand LEFT JOIN venturi_kind k ON k.kind = cand.kind
        CROSS JOIN LATERAL (SELECT
            CASE WHEN cand.slot_key IS NOT NULL THEN 's' || sep || cand.slot_key END AS g1,
            CASE WHEN k.concurrency > 0 THEN 'k' || sep || cand.kind END AS g2,
            CASE WHEN v_qconc > 0 THEN 'q' || sep || p_queue END AS g3,
            CASE WHEN k.rate_n > 0 THEN 'r' || sep || cand.kind
                 || CASE WHEN k.rate_by_part THEN sep || COALESCE(cand.part, '') ELSE '' END END AS g4,
            CASE WHEN k.brk_failures > 0 THEN 'b' || sep || cand.kind
                 || CASE WHEN k.brk_by_part THEN sep || COALESCE(cand.part, '') ELSE '' END END AS g5) g
    ), gk AS (
        -- One row per candidate and gate (the slot first), with the gate's index in the
        -- sorted list of distinct keys.
        SELECT x.ord, x.pos, x.key, dense_rank() OVER (ORDER BY x.key)::integer AS gi
        FROM (SELECT ck.ord, 1 AS pos, ck.g1 AS key FROM ck WHERE ck.g1 IS NOT NULL
              UNION ALL SELECT ck.ord, 2, ck.g2 FROM ck WHERE ck.g2 IS NOT NULL
              UNION ALL SELECT ck.ord, 3, ck.g3 FROM ck WHERE ck.g3 IS NOT NULL
              UNION ALL SELECT ck.ord, 4, ck.g4 FROM ck WHERE ck.g4 IS NOT NULL
              UNION ALL SELECT ck.ord, 5, ck.g5 FROM ck WHERE ck.g5 IS NOT NULL) x
    )
    SELECT
        (SELECT array_agg(ck.id ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(ck.slot_key ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(ck.part ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(ck.slot_limit ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(ck.slot_policy ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(ck.ng ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(gk.gi ORDER BY gk.ord, gk.pos) FROM gk),
        (SELECT array_agg(DISTINCT gk.key ORDER BY gk.key) FROM gk)
    INTO c_id, c_slot, c_part, c_limit, c_policy, c_off, c_gl, g_key;

    n := COALESCE(cardinality(c_id), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    g_key := COALESCE(g_key, '{}');
    c_gl := COALESCE(c_gl, '{}');
    -- c_off holds each candidate's number of gates: make it where its gates start.
    j := 1;
    FOR i IN 1..n LOOP
        g := c_off[i];
        c_off[i] := j;
        j := j + g;
    END LOOP;
    c_off[n + 1] := j;

    -- Lock the gates, then read their state in a fresh snapshot: every claim that held
    -- these locks before has committed, and its running jobs are visible.
    PERFORM venturi_gate_lock(g_key);
    v_check := clock_timestamp();
    -- Every slot's running jobs, in one grouped pass, as a map from slot key to count
    -- (migration 14): the claim looks its slots up in it, so no plan can join each slot of
    -- the claim with every running job.
    IF EXISTS (SELECT 1 FROM unnest(g_key) AS k WHERE left(k, 1) = 's') THEN
        SELECT COALESCE(jsonb_object_agg(su.s, su.n), '{}') INTO v_slot_used
        FROM (SELECT x.slot_key AS s, count(*)::integer AS n
              FROM venturi_job x
              WHERE x.state = 'running' AND x.slot_key IS NOT NULL
              GROUP BY x.slot_key) su;
    END IF;
    INSERT INTO venturi_gate (key, kind, part)
    SELECT gkey, split_part(gkey, sep, 2), NULLIF(split_part(gkey, sep, 3), '')
    FROM unnest(g_key) AS gkey WHERE left(gkey, 1) IN ('r', 'b')
    ON CONFLICT DO NOTHING;

    -- Each gate's use and capacity. Running counts come from the job rows (one grouped
    -- index scan per gate type); rate windows and breakers from venturi_gate.
    WITH kind_used AS (
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
                         -- A slot's running jobs, looked up in the map counted above
                         -- (migration 14; see the header).
                         WHEN 's' THEN COALESCE((v_slot_used ->> substr(gs.key, 3))::integer, 0)
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
           array_agg(t.typ = 's' ORDER BY gs.gi),
           array_agg(t.typ IN ('r', 'b') ORDER BY gs.gi)
    INTO g_used, g_cap, g_slot, g_rb
    FROM unnest(g_key) WITH ORDINALITY AS gs(key, gi)
    CROSS JOIN LATERAL (SELECT left(gs.key, 1) AS typ) t
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
        IF n_admit >= p_max THEN
            v_full := true;
            EXIT;
        END IF;
        ok := true;
        slot_full := false;
        FOR j IN c_off[i] .. c_off[i + 1] - 1 LOOP
            g := c_gl[j];
            IF g_slot[g] THEN
                IF g_used[g] >= c_limit[i] THEN
                    ok := false;
                    slot_full := true;
                END IF;
            ELSIF g_used[g] >= g_cap[g] THEN
                ok := false;
                IF g_rb[g] THEN
                    blocked_g := blocked_g || g;
                END IF;
            END IF;
        END LOOP;
        IF ok THEN
            n_admit := n_admit + 1;
            admit[n_admit] := c_id[i];
            v_last := COALESCE(c_part[i], v_last);
            FOR j IN c_off[i] .. c_off[i + 1] - 1 LOOP
                g := c_gl[j];
                g_used[g] := g_used[g] + 1;
                IF g_rb[g] THEN
                    admit_g := admit_g || g;
                END IF;
            END LOOP;
        ELSIF slot_full AND c_policy[i] = 2 THEN
            dropped := dropped || c_id[i];
            drop_note := drop_note || format('dropped: slot %s is full (%s of %s running; policy DropIfRunning)',
                                              c_slot[i], g_used[c_gl[c_off[i]]], c_limit[i]);
        ELSIF slot_full AND c_policy[i] = 1 AND NOT c_slot[i] = ANY(replace_slots) THEN
            replace_slots := replace_slots || c_slot[i];
        END IF;
    END LOOP;
    -- Every candidate was looked at: the next claim starts after the last partition
    -- visited, so partitions held back by their gates do not keep the others waiting.
    IF NOT v_full AND cardinality(v_parts) > 0 THEN
        v_last := v_parts[cardinality(v_parts)];
    END IF;

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

    -- The next claim starts after the partition served last (or visited last), even when
    -- this one admitted nothing: otherwise partitions held back by their gates would keep
    -- the ones after them from ever being looked at. The queue's row stays locked until
    -- the claim commits; what follows locks only gate rows, which the claims that hold
    -- their stripes' locks write.
    IF v_last IS DISTINCT FROM v_after THEN
        INSERT INTO venturi_queue AS vq (name, rr_after) VALUES (p_queue, v_last)
        ON CONFLICT (name) DO UPDATE SET rr_after = EXCLUDED.rr_after;
    END IF;

    IF n_admit = 0 THEN
        IF v_wake IS NOT NULL THEN
            RETURN QUERY SELECT NULL::uuid, ''::text, NULL::jsonb, NULL::jsonb, 0, 0, 0::bigint, NULL::jsonb, 0::bigint,
                v_now, NULL::text, GREATEST((EXTRACT(EPOCH FROM v_wake - clock_timestamp()) * 1000000)::bigint, 0),
            NULL::jsonb, NULL::timestamptz;
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

    -- The worker's kinds that have a breaker, and whether it is per partition.
    SELECT COALESCE(jsonb_object_agg(k.kind, k.brk_by_part), '{}') INTO v_brk
    FROM venturi_kind k WHERE k.kind = ANY(p_kinds) AND k.brk_failures > 0;

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
            -- The breaker a run reports to, from the map of the worker's kinds read above
            -- (migration 14: a probe of venturi_kind per claimed row before).
            breaker = CASE WHEN v_brk ? x.kind THEN 'b' || sep || x.kind
                           || CASE WHEN (v_brk ->> x.kind)::boolean THEN sep || COALESCE(x.part, '') ELSE '' END END
        -- ANY(ARRAY(SELECT ...)), not ANY(admit): with the array as a parameter the planner
        -- saw its length and chose a sequential scan of the table for claims of a few
        -- hundred jobs (8 ms at 50,000 rows, growing with the table); as a subquery's
        -- result it finds the rows by primary key, as the plain claim does.
        WHERE x.id = ANY(ARRAY(SELECT unnest(admit)))
        RETURNING x.id, x.kind, x.payload, x.carry, x.runs, x.failures, x.lease_token, x.journal,
                  x.journal_moved, x.attempted_at, x.breaker, x.priority, x.run_at, x.meta
    )
    SELECT c.id, c.kind, c.payload, c.carry, c.runs, c.failures, c.lease_token, c.journal,
           c.journal_moved, c.attempted_at, c.breaker, NULL::bigint, COALESCE(c.meta, 'null'::jsonb), c.run_at
    FROM claimed c JOIN unnest(admit) WITH ORDINALITY AS a(id, o) ON a.id = c.id
    ORDER BY a.o;
    IF v_wake IS NOT NULL THEN
        RETURN QUERY SELECT NULL::uuid, ''::text, NULL::jsonb, NULL::jsonb, 0, 0, 0::bigint, NULL::jsonb, 0::bigint,
            v_now, NULL::text, GREATEST((EXTRACT(EPOCH FROM v_wake - clock_timestamp()) * 1000000)::bigint, 0),
            NULL::jsonb, NULL::timestamptz;
    END IF;
END
$$;
