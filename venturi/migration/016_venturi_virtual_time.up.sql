-- venturi schema, version 16: the gated claim in virtual-time order (start-time fair
-- queueing) instead of a round-robin walk over partitions.
--
-- Up to version 15 a gated claim walked the partitions with available jobs from a cursor
-- (a skip scan: one index probe per partition), locked each partition's most urgent jobs,
-- and moved the cursor: fair, but it cost about twice the plain claim per job, since every
-- claimed job meant a visit to a partition head (bench/FINDINGS.md section 9b). Now each
-- gated job gets a virtual time, vt, when it becomes available, and a claim reads the
-- queue's gated jobs in (priority, vt, id) order: one range scan of one index, as the plain
-- claim reads its jobs.
--
-- vt = max(the smallest vt available in the queue at the job's priority,
--          the vt of its partition's last available job at that priority + 1)
-- (a trigger on every write that makes a gated job available: enqueue, promotion of due
-- jobs, a retry, a rescue, a timed-out wait, a kind that gains limits; older workers'
-- writes included). A partition with 90,000 jobs pending holds vt k..k+89,999; a job of a
-- partition with nothing pending lands at the front, beside the queue's oldest: each vt
-- "level" holds at most one job of each partition, so claims take partitions in turn with
-- no cursor. Within a partition jobs run in the order they became available (their due
-- time, their enqueue when enqueued due), rather than strictly by due time. A job released
-- unstarted by a stopping worker keeps its vt (its place).
--
-- The claim passes over jobs it knows it cannot admit, without locking them, so a flood of
-- blocked partitions cannot hide runnable ones behind it: every gated claim first takes
-- all 64 gate stripes' advisory locks (gated claims of a queue already serialized on the
-- queue's cursor row; now they serialize on the stripes instead and no longer write the
-- queue row), counts the running jobs of every slot and of the worker's limited kinds once,
-- and reads the breakers that are open and the rates that are full (venturi_gate.full_until,
-- new: written by the claim that fills a rate window). The candidate scan skips jobs of full
-- slots whose policy is to wait, of kinds at their concurrency or whose kind-wide breaker
-- is open or rate full, and of partitions whose breaker is open or rate full. The admission
-- then runs as before, on the same counts.
--
-- Changes: venturi_job.vt and the indexes venturi_job_claim_vt_idx and venturi_job_part_vt_idx
-- (two more index entries per available gated job), venturi_job_running_gated_idx dropped
-- (one less per running gated job); venturi_gate.full_until and two small partial indexes;
-- venturi_queue.rr_after is no longer read or written (kept for older workers' binaries,
-- which never read it themselves). The available gated jobs present get vt in their
-- partition's order, partitions interleaved.
--
-- Rolling deploy: older workers keep working. They call venturi_claim_gated with the same
-- arguments and get the new body; their writes go through the trigger; their one-time
-- probe (the queue's first gated job by partition) reads venturi_job_part_vt_idx or
-- venturi_job_claim_gated_idx, which stays for the ops listing. Creating the indexes reads the available gated jobs under a write lock (seconds
-- per million); with a large backlog, create them first with CREATE INDEX CONCURRENTLY under
-- the same names and predicates after adding the column.

ALTER TABLE venturi_job ADD COLUMN vt bigint;
ALTER TABLE venturi_gate ADD COLUMN full_until timestamptz; -- a rate gate: no room until then

UPDATE venturi_job j SET vt = o.rn
FROM (SELECT x.id, row_number() OVER (PARTITION BY x.queue, x.part, x.priority ORDER BY x.run_at, x.id) AS rn
      FROM venturi_job x WHERE x.state = 'available' AND x.part IS NOT NULL) o
WHERE j.id = o.id;

CREATE INDEX IF NOT EXISTS venturi_job_claim_vt_idx
    ON venturi_job (queue, priority DESC, vt, id) WHERE state = 'available' AND part IS NOT NULL;
CREATE INDEX IF NOT EXISTS venturi_job_part_vt_idx
    ON venturi_job (queue, part, priority, vt) WHERE state = 'available' AND part IS NOT NULL;
-- A running gated job's kind was indexed for the kind's running count (migration 6), but
-- the claim counts a kind's running jobs plain ones included, which this index cannot
-- serve: only the ops explanation read it. Every gated claim paid an entry per job for
-- it (the claim's UPDATE of 900 slot jobs: 21.6 ms with it, 14.3 ms without).
DROP INDEX IF EXISTS venturi_job_running_gated_idx;
-- The gates that hold jobs back: open or probing breakers, full rate windows.
CREATE INDEX IF NOT EXISTS venturi_gate_open_idx ON venturi_gate (kind) WHERE open_until IS NOT NULL;
CREATE INDEX IF NOT EXISTS venturi_gate_full_idx ON venturi_gate (kind) WHERE full_until IS NOT NULL;

-- venturi_job_vt gives a gated job that becomes available its virtual time (see above).
-- Both reads are index probes: the queue's front at the priority in
-- venturi_job_claim_vt_idx, the partition's last in venturi_job_part_vt_idx. (Reading the
-- partition's last by due time in venturi_job_claim_gated_idx instead, without an index
-- more, gave one EnqueueMany's jobs the same virtual time: they share their due time, and
-- a statement need not insert its rows in ID order.)
CREATE FUNCTION venturi_job_vt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Released unstarted (ReleaseUnstarted undoes the claim's run): the job keeps its place.
    IF TG_OP = 'UPDATE' AND OLD.vt IS NOT NULL AND OLD.state = 'running' AND NEW.runs < OLD.runs
       AND OLD.part IS NOT DISTINCT FROM NEW.part AND OLD.priority = NEW.priority THEN
        RETURN NEW;
    END IF;
    NEW.vt := GREATEST(
        COALESCE((SELECT x.vt FROM venturi_job x
                  WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = NEW.queue
                    AND x.priority = NEW.priority
                  ORDER BY x.vt, x.id LIMIT 1), 0),
        COALESCE((SELECT x.vt FROM venturi_job x
                  WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = NEW.queue
                    AND x.part = NEW.part AND x.priority = NEW.priority
                  ORDER BY x.vt DESC LIMIT 1) + 1, 0));
    RETURN NEW;
END
$$;

CREATE TRIGGER venturi_job_vt_insert
    BEFORE INSERT ON venturi_job
    FOR EACH ROW WHEN (NEW.state = 'available' AND NEW.part IS NOT NULL)
    EXECUTE FUNCTION venturi_job_vt();
CREATE TRIGGER venturi_job_vt_update
    BEFORE UPDATE OF state, part, queue, priority ON venturi_job
    FOR EACH ROW WHEN (NEW.state = 'available' AND NEW.part IS NOT NULL
                       AND (OLD.state <> 'available' OR OLD.part IS DISTINCT FROM NEW.part
                            OR OLD.queue <> NEW.queue OR OLD.priority <> NEW.priority))
    EXECUTE FUNCTION venturi_job_vt();

-- venturi_claim_gated (migrations 6, 7, 12, 14) keeps its arguments and result columns:
-- the candidates come from one scan in virtual-time order (see the header); the admission
-- is unchanged.
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
    ns      CONSTANT integer := hashtext(current_schema() || '.venturi_gate'); -- venturi_gate_lock's
    v_paused boolean;
    v_qconc integer;
    v_now   timestamptz; -- the admitted runs' start
    v_check timestamptz; -- when the gates were checked
    v_probe text;
    v_cand  integer; -- gated candidates one claim locks, at most
    v_shut  text[];  -- kinds none of whose jobs can be admitted now
    v_shut_parts text[]; -- kind || sep || partition: partitions held back by a breaker or a rate
    v_kind_used jsonb := '{}'; -- limited kind -> its running jobs
    -- candidates, in admission order
    c_id     uuid[];
    c_slot   text[];
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
    v_wake_pre timestamptz; -- when a gate the candidate scan passed over opens
    dropped uuid[] := '{}';
    drop_note text[] := '{}';
    replace_slots text[] := '{}';
    r       record;
    v_slot_used jsonb := '{}'; -- slot key -> its running jobs
    v_brk   jsonb; -- kind -> its breaker is per partition, for the worker's kinds with one
BEGIN
    SELECT vq.paused, vq.concurrency INTO v_paused, v_qconc FROM venturi_queue vq WHERE vq.name = p_queue;
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

    -- Every gate stripe's lock, in stripe order (venturi_gate_lock's order, so no locker
    -- waits in a cycle), then the gates' state in a fresh snapshot: every claim that held
    -- these locks before has committed, and its running jobs are visible. The counts serve
    -- both the candidate scan (what to pass over) and the admission.
    FOR i IN 0..63 LOOP
        PERFORM pg_advisory_xact_lock(ns, i);
    END LOOP;
    v_check := clock_timestamp();
    -- Every slot's running jobs, in one grouped pass, as a map from slot key to count
    -- (migration 14: no plan can join each slot of the claim with every running job).
    SELECT COALESCE(jsonb_object_agg(su.s, su.n), '{}') INTO v_slot_used
    FROM (SELECT x.slot_key AS s, count(*)::integer AS n
          FROM venturi_job x
          WHERE x.state = 'running' AND x.slot_key IS NOT NULL
          GROUP BY x.slot_key) su;
    -- The running jobs of the worker's kinds that have a concurrency, plain ones too: a
    -- job claimed as plain before the kind's limits were recorded still runs.
    SELECT COALESCE(jsonb_object_agg(ku.s, ku.n), '{}') INTO v_kind_used
    FROM (SELECT x.kind AS s, count(*)::integer AS n
          FROM venturi_job x
          WHERE x.state = 'running'
            AND x.kind = ANY(ARRAY(SELECT k.kind FROM venturi_kind k WHERE k.kind = ANY(p_kinds) AND k.concurrency > 0))
          GROUP BY x.kind) ku;
    -- A limited queue at its limit admits nothing.
    IF v_qconc > 0 AND (SELECT count(*) FROM venturi_job x WHERE x.state = 'running' AND x.queue = p_queue) >= v_qconc THEN
        RETURN;
    END IF;
    -- The gates that hold jobs back until a known time: open or probing breakers and full
    -- rate windows of the worker's kinds, kind-wide (part NULL) or per partition.
    WITH closed AS (
        SELECT gt.kind, gt.part, CASE WHEN gt.open_until > v_check THEN gt.open_until ELSE gt.probe_until END AS until
        FROM venturi_gate gt
        WHERE gt.open_until IS NOT NULL AND gt.kind = ANY(p_kinds) AND left(gt.key, 1) = 'b'
          AND (gt.open_until > v_check OR gt.probe_until > v_check)
        UNION ALL
        SELECT gt.kind, gt.part, gt.full_until
        FROM venturi_gate gt
        WHERE gt.full_until IS NOT NULL AND gt.kind = ANY(p_kinds) AND left(gt.key, 1) = 'r'
          AND gt.full_until > v_check
    )
    SELECT COALESCE(array_agg(DISTINCT c.kind) FILTER (WHERE c.part IS NULL), '{}'),
           COALESCE(array_agg(DISTINCT c.kind || sep || c.part) FILTER (WHERE c.part IS NOT NULL), '{}'),
           min(c.until)
    INTO v_shut, v_shut_parts, v_wake_pre
    FROM closed c;
    -- Kinds at their concurrency.
    v_shut := v_shut || ARRAY(
        SELECT k.kind FROM venturi_kind k
        WHERE k.kind = ANY(p_kinds) AND k.concurrency > 0
          AND COALESCE((v_kind_used ->> k.kind)::integer, 0) >= k.concurrency);

    -- Candidates, locked: the queue's gated jobs in virtual-time order (see the header),
    -- passing over those the counts above already hold back (a full slot that waits, a
    -- kind or partition that is shut), as many as the claim asks for and 16 more (some
    -- may still be held back, by the claim's own admissions), at least 32; then, with a
    -- queue limit, the queue's plain jobs (the queue's gate alone applies to them).
    v_cand := GREATEST(p_max + 16, 32);
    WITH gated AS (
        SELECT x.id, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.vt
        FROM venturi_job x
        WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue
          AND x.kind = ANY(p_kinds)
          AND NOT x.kind = ANY(v_shut)
          AND (cardinality(v_shut_parts) = 0 OR NOT (x.kind || sep || x.part) = ANY(v_shut_parts))
          AND (x.slot_key IS NULL OR x.slot_policy <> 0
               OR COALESCE((v_slot_used ->> x.slot_key)::integer, 0) < x.slot_limit)
        ORDER BY x.priority DESC, x.vt, x.id
        LIMIT v_cand
        FOR UPDATE SKIP LOCKED
    ), plain AS (
        SELECT x.id, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.run_at
        FROM venturi_job x
        WHERE v_qconc > 0 AND x.state = 'available' AND x.part IS NULL AND x.queue = p_queue
          AND x.kind = ANY(p_kinds) AND NOT x.kind = ANY(v_shut)
        ORDER BY x.priority DESC, x.run_at, x.id
        LIMIT LEAST(p_max, v_qconc)
        FOR UPDATE SKIP LOCKED
    ), cand AS (
        -- Most urgent first; within a priority the gated jobs in their order and a limited
        -- queue's plain jobs taken in turn with them (plain first).
        SELECT c.*, row_number() OVER (ORDER BY c.priority DESC, c.rn, c.src, c.id) AS ord
        FROM (SELECT gated.id, gated.kind, gated.part, gated.slot_key, gated.slot_limit, gated.slot_policy,
                     gated.priority, row_number() OVER (PARTITION BY gated.priority ORDER BY gated.vt, gated.id) AS rn,
                     1 AS src FROM gated
              UNION ALL
              SELECT plain.id, plain.kind, plain.part, plain.slot_key, plain.slot_limit, plain.slot_policy,
                     plain.priority, row_number() OVER (PARTITION BY plain.priority ORDER BY plain.run_at, plain.id),
                     0 FROM plain) c
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
        (SELECT array_agg(ck.slot_limit ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(ck.slot_policy ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(ck.ng ORDER BY ck.ord) FROM ck),
        (SELECT array_agg(gk.gi ORDER BY gk.ord, gk.pos) FROM gk),
        (SELECT array_agg(DISTINCT gk.key ORDER BY gk.key) FROM gk)
    INTO c_id, c_slot, c_limit, c_policy, c_off, c_gl, g_key;

    n := COALESCE(cardinality(c_id), 0);
    IF n = 0 THEN
        IF v_wake_pre IS NOT NULL THEN
            RETURN QUERY SELECT NULL::uuid, ''::text, NULL::jsonb, NULL::jsonb, 0, 0, 0::bigint, NULL::jsonb, 0::bigint,
                clock_timestamp(), NULL::text, GREATEST((EXTRACT(EPOCH FROM v_wake_pre - clock_timestamp()) * 1000000)::bigint, 0),
                NULL::jsonb, NULL::timestamptz;
        END IF;
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

    INSERT INTO venturi_gate (key, kind, part)
    SELECT gkey, split_part(gkey, sep, 2), NULLIF(split_part(gkey, sep, 3), '')
    FROM unnest(g_key) AS gkey WHERE left(gkey, 1) IN ('r', 'b')
    ON CONFLICT DO NOTHING;

    -- Each gate's use and capacity: running counts from the maps above; rate windows and
    -- breakers from venturi_gate.
    WITH queue_used AS (
        SELECT count(*)::integer AS n
        FROM venturi_job x
        WHERE v_qconc > 0 AND x.state = 'running' AND x.queue = p_queue
    )
    SELECT array_agg(CASE t.typ
                         WHEN 's' THEN COALESCE((v_slot_used ->> substr(gs.key, 3))::integer, 0)
                         WHEN 'k' THEN COALESCE((v_kind_used ->> substr(gs.key, 3))::integer, 0)
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
    LEFT JOIN venturi_gate gt ON t.typ IN ('r', 'b') AND gt.key = gs.key
    LEFT JOIN venturi_kind k ON t.typ = 'r' AND k.kind = gt.kind;
    -- The admitted runs start now: after the snapshot that counted the running jobs, so a
    -- run that ended just before it has ended before this, by the database clock, and
    -- journals never show more runs at once than a gate allows.
    v_now := clock_timestamp();

    -- Admit in order: a candidate runs when each of its gates has room. A full slot is
    -- handled by the candidate's policy.
    FOR i IN 1..n LOOP
        EXIT WHEN n_admit >= p_max;
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

    -- A gate the candidate scan passed over wakes the worker when it opens, too.
    IF v_wake_pre IS NOT NULL AND (v_wake IS NULL OR v_wake_pre < v_wake) THEN
        v_wake := v_wake_pre;
    END IF;

    IF n_admit = 0 THEN
        IF v_wake IS NOT NULL THEN
            RETURN QUERY SELECT NULL::uuid, ''::text, NULL::jsonb, NULL::jsonb, 0, 0, 0::bigint, NULL::jsonb, 0::bigint,
                v_now, NULL::text, GREATEST((EXTRACT(EPOCH FROM v_wake - clock_timestamp()) * 1000000)::bigint, 0),
            NULL::jsonb, NULL::timestamptz;
        END IF;
        RETURN;
    END IF;

    -- Rates: record the starts admitted now; forget those older than the period. A window
    -- this fills is full until its oldest start leaves it (full_until, migration 16: the
    -- next claims pass over its jobs without locking them).
    UPDATE venturi_gate gt SET
        rate_at = a.kept_at || v_now,
        rate_n  = a.kept_n || a.admitted,
        full_until = CASE WHEN COALESCE((SELECT sum(c) FROM unnest(a.kept_n) AS c), 0) + a.admitted >= k.rate_n
                          THEN COALESCE(a.kept_at[1], v_now) + k.rate_period END,
        updated_at = v_now
    FROM venturi_kind k, (
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
    WHERE gt.key = a.key AND k.kind = gt.kind;

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
