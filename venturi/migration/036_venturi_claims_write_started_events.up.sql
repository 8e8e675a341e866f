-- venturi schema, version 36: the claims write the started events.
--
-- A job that records events (Task.Events, QueueConfig.StreamEvents) had its started event
-- written by venturi_event_write, an AFTER trigger fired for every claimed row: an executor
-- started and ended per row for its insert, a NOTIFY per row, PL/pgSQL per row, 13.3 µs of
-- the events' 18.3 µs a job on the server (bench/FINDINGS.md section 29). The claims now
-- write them, one insert per claim and one NOTIFY when any was written, as FinishRuns
-- writes the final events: the gated claim in a CTE of its final statement, the plain claim
-- by a statement the worker sends with the claim's COMMIT when it claimed such jobs
-- (WriteStartedEvents, queries/claim.sql), so a claim of jobs that record no events pays
-- nothing for them. The claim's transaction sets venturi.claim_started_events, and the
-- trigger skips the move from available to running while it is on.
--
-- Rolling deploy: an older worker's claim transaction does not set the setting, so the
-- trigger writes the started events of the jobs it claims, as before; the gated claim (this
-- function, which every worker calls) writes its own and sets the setting for its statement
-- alone. Each started event is written once whichever worker claims the job.

CREATE OR REPLACE FUNCTION venturi_claim_gated(p_queue text, p_kinds text[], p_max integer, p_lease_us bigint, p_worker text, p_max_failures integer, p_channel text)
 RETURNS TABLE(id uuid, kind text, payload jsonb, carry jsonb, runs integer, failures integer, lease_token bigint, journal jsonb, journal_moved bigint, attempted_at timestamp with time zone, breaker text, wake_in_us bigint, meta jsonb, run_at timestamp with time zone)
 LANGUAGE plpgsql
 SET jit TO 'off'
AS $function$
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
    c_tid    tid[];
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
    admit_tid tid[] := '{}'; -- the admitted rows' versions, as locked: the claim updates them by tuple ID
    v_started text; -- venturi.claim_started_events as the caller left it
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
    v_other boolean; -- the worker's kinds have a concurrency or a breaker
    v_rated boolean; -- the worker's kinds have a rate
    new_gates text[] := '{}';  -- rate gates of admitted jobs that have no row yet
    rate_keys text[] := '{}';  -- rate gates that admitted jobs, and how many
    rate_adm  integer[] := '{}';
    probe_keys text[] := '{}'; -- breakers that admitted a job (a half-open one: its probe)
    blocked   text[] := '{}';  -- rate and breaker gates that held a candidate back
    -- the slots-and-rates path's one statement: the candidates that pass
    -- their gates (ok_*) and those a rate holds back (nr_*), in admission order
    ok_rkey    text[];
    ok_missing boolean[];
    ok_ord     integer[];
    nr_rkey    text[];
    nr_ord     integer[];
    v_policy   boolean := false; -- a candidate held back has a slot policy: the full statement decides
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
    PERFORM pg_advisory_xact_lock(ns, s) FROM generate_series(0, 63) AS s;
    v_check := clock_timestamp();
    -- Every slot's running jobs, in one grouped pass, as a map from slot key to count
    -- (no plan can join each slot of the claim with every running job).
    SELECT COALESCE(jsonb_object_agg(su.s, su.n), '{}') INTO v_slot_used
    FROM (SELECT x.slot_key AS s, count(*)::integer AS n
          FROM venturi_job x
          WHERE x.state = 'running' AND x.slot_key IS NOT NULL
          GROUP BY x.slot_key) su;
    -- Slots and rates alone (the worker's kinds have no concurrency and no breaker, the
    -- queue no limit): a candidate meets its slot and its rate window at most, and is
    -- admitted when each one's use plus the candidate's rank among the claim's candidates
    -- of that gate stays within it (exact with one gate; with both, a candidate held back
    -- by one still takes its rank in the other, so a claim may admit fewer, never more). One
    -- statement decides the claim; the gate arrays and the admission loop below are for
    -- kind and queue concurrency and breakers.
    SELECT COALESCE(bool_or(k.concurrency > 0 OR k.brk_failures > 0), false), COALESCE(bool_or(k.rate_n > 0), false)
    INTO v_other, v_rated
    FROM venturi_kind k WHERE k.kind = ANY(p_kinds);
    IF v_qconc = 0 AND NOT v_other THEN
        v_shut := '{}';
        v_shut_parts := '{}';
        IF v_rated THEN -- full rate windows: their jobs are passed over
            SELECT COALESCE(array_agg(DISTINCT gt.kind) FILTER (WHERE gt.part IS NULL), '{}'),
                   COALESCE(array_agg(DISTINCT gt.kind || sep || gt.part) FILTER (WHERE gt.part IS NOT NULL), '{}'),
                   min(gt.full_until)
            INTO v_shut, v_shut_parts, v_wake_pre
            FROM venturi_gate gt
            WHERE gt.full_until IS NOT NULL AND gt.kind = ANY(p_kinds) AND left(gt.key, 1) = 'r'
              AND gt.full_until > v_check;
        END IF;
        -- One statement reads and locks the candidates with whether each
        -- passes its slot and its rate window. When no candidate held back has a slot
        -- policy (Replace or DropIfRunning: the common case), the claim admits the first
        -- p_max that pass, and the rate bookkeeping comes from the same arrays: what the
        -- statement below computes with three more window passes, their sorts and seven
        -- aggregates. When one has, the statement below decides, with its drops and stop
        -- requests; the rows locked here are this transaction's, so it
        -- reads the same candidates.
        IF NOT v_rated THEN
            -- Slots alone (or no gate at all: partitions): the candidates in admission
            -- order, and whether each passes its slot.
            WITH cand AS (
                SELECT x.id, x.tid, x.slot_key, x.slot_limit, x.slot_policy,
                       row_number() OVER (ORDER BY x.priority DESC, x.vt, x.id) AS ord
                FROM (SELECT x.id, x.ctid AS tid, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.vt
                      FROM venturi_job x
                      WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue
                        AND x.kind = ANY(p_kinds)
                        AND (x.slot_key IS NULL OR x.slot_policy <> 0
                             OR COALESCE((v_slot_used ->> x.slot_key)::integer, 0) < x.slot_limit)
                      ORDER BY x.priority DESC, x.vt, x.id
                      LIMIT GREATEST(p_max + 16, 32)
                      FOR UPDATE SKIP LOCKED) x
            ), passed AS (
                SELECT c.id, c.tid, c.ord, c.slot_policy,
                       c.slot_key IS NULL
                       OR COALESCE((v_slot_used ->> c.slot_key)::integer, 0)
                          + row_number() OVER (PARTITION BY c.slot_key ORDER BY c.ord) <= c.slot_limit AS ok
                FROM cand c
            )
            SELECT COALESCE(array_agg(p.id ORDER BY p.ord) FILTER (WHERE p.ok), '{}'),
                   COALESCE(array_agg(p.tid ORDER BY p.ord) FILTER (WHERE p.ok), '{}'),
                   COALESCE(bool_or(NOT p.ok AND p.slot_policy <> 0), false)
            INTO admit, admit_tid, v_policy
            FROM passed p;
        ELSE
            -- Rates too: the candidates that pass both gates and, apart, those their rate
            -- holds back (a wake-up is due when its window opens).
            WITH kl AS (
                SELECT k.kind, k.rate_n, k.rate_period, k.rate_by_part
                FROM venturi_kind k WHERE k.kind = ANY(p_kinds) AND k.rate_n > 0
            ), cand AS (
                SELECT x.id, x.tid, x.slot_key, x.slot_limit, x.slot_policy, x.ord,
                       CASE WHEN kl.kind IS NOT NULL THEN 'r' || sep || x.kind
                            || CASE WHEN kl.rate_by_part THEN sep || COALESCE(x.part, '') ELSE '' END END AS rkey,
                       kl.rate_n, kl.rate_period
                FROM (SELECT x.*, row_number() OVER (ORDER BY x.priority DESC, x.vt, x.id)::integer AS ord
                      FROM (SELECT x.id, x.ctid AS tid, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.vt
                            FROM venturi_job x
                            WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue
                              AND x.kind = ANY(p_kinds)
                              AND NOT x.kind = ANY(v_shut)
                              AND (cardinality(v_shut_parts) = 0 OR NOT (x.kind || sep || x.part) = ANY(v_shut_parts))
                              AND (x.slot_key IS NULL OR x.slot_policy <> 0
                                   OR COALESCE((v_slot_used ->> x.slot_key)::integer, 0) < x.slot_limit)
                            ORDER BY x.priority DESC, x.vt, x.id
                            LIMIT GREATEST(p_max + 16, 32)
                            FOR UPDATE SKIP LOCKED) x) x
                LEFT JOIN kl ON kl.kind = x.kind
            ), rates AS MATERIALIZED (
                SELECT r.key, r.cap, gt.key IS NULL AS missing,
                       COALESCE((SELECT sum(w.c) FROM unnest(gt.rate_at, gt.rate_n) AS w(at, c)
                                 WHERE w.at > v_check - r.period), 0)::integer AS used
                FROM (SELECT DISTINCT c.rkey AS key, c.rate_n AS cap, c.rate_period AS period FROM cand c
                      WHERE c.rkey IS NOT NULL) r
                LEFT JOIN venturi_gate gt ON gt.key = r.key
            ), passed AS (
                -- As in the statement below: a candidate passes its slot when the slot's running
                -- jobs plus its rank among the candidates of its slot stay within the limit, and
                -- its rate window likewise.
                SELECT c.id, c.tid, c.ord, c.rkey, c.slot_policy, rt.missing,
                       c.slot_key IS NULL
                       OR COALESCE((v_slot_used ->> c.slot_key)::integer, 0)
                          + row_number() OVER (PARTITION BY c.slot_key ORDER BY c.ord) <= c.slot_limit AS slot_ok,
                       c.rkey IS NULL
                       OR rt.used + row_number() OVER (PARTITION BY c.rkey ORDER BY c.ord) <= rt.cap AS rate_ok
                FROM cand c LEFT JOIN rates rt ON rt.key = c.rkey
            )
            SELECT COALESCE(array_agg(p.id ORDER BY p.ord) FILTER (WHERE p.slot_ok AND p.rate_ok), '{}'),
                   COALESCE(array_agg(p.tid ORDER BY p.ord) FILTER (WHERE p.slot_ok AND p.rate_ok), '{}'),
                   COALESCE(array_agg(p.rkey ORDER BY p.ord) FILTER (WHERE p.slot_ok AND p.rate_ok), '{}'),
                   COALESCE(array_agg(p.missing ORDER BY p.ord) FILTER (WHERE p.slot_ok AND p.rate_ok), '{}'),
                   COALESCE(array_agg(p.ord ORDER BY p.ord) FILTER (WHERE p.slot_ok AND p.rate_ok), '{}'),
                   COALESCE(array_agg(p.rkey ORDER BY p.ord) FILTER (WHERE NOT p.rate_ok), '{}'),
                   COALESCE(array_agg(p.ord ORDER BY p.ord) FILTER (WHERE NOT p.rate_ok), '{}'),
                   COALESCE(bool_or(NOT (p.slot_ok AND p.rate_ok) AND p.slot_policy <> 0), false)
            INTO admit, admit_tid, ok_rkey, ok_missing, ok_ord, nr_rkey, nr_ord, v_policy
            FROM passed p;
        END IF;
        IF NOT v_policy THEN
            -- The claim takes the first p_max that pass. A candidate a rate held back counts
            -- as seen (its window wakes the worker) unless the claim was full before it:
            -- after its p_max-th admission.
            IF v_rated AND cardinality(admit) >= p_max THEN
                nr_rkey := ARRAY(SELECT b.k FROM unnest(nr_rkey, nr_ord) AS b(k, o) WHERE b.o < ok_ord[p_max]);
                ok_rkey := ok_rkey[1:p_max];
                ok_missing := ok_missing[1:p_max];
            END IF;
            IF cardinality(admit) > p_max THEN
                admit := admit[1:p_max];
                admit_tid := admit_tid[1:p_max];
            END IF;
            IF v_rated THEN -- the admitted jobs' windows (how many each), new ones, and those that held one back
                SELECT COALESCE(array_agg(rk.key ORDER BY rk.key), '{}'), COALESCE(array_agg(rk.n ORDER BY rk.key), '{}'),
                       COALESCE(array_agg(rk.key ORDER BY rk.key) FILTER (WHERE rk.missing), '{}'),
                       ARRAY(SELECT DISTINCT b.k FROM unnest(nr_rkey) AS b(k))
                INTO rate_keys, rate_adm, new_gates, blocked
                FROM (SELECT a.k AS key, count(*)::integer AS n, bool_or(a.m) AS missing
                      FROM unnest(ok_rkey, ok_missing) AS a(k, m)
                      WHERE a.k IS NOT NULL GROUP BY a.k) rk;
            END IF;
        ELSE
            WITH kl AS (
                SELECT k.kind, k.rate_n, k.rate_period, k.rate_by_part
                FROM venturi_kind k WHERE v_rated AND k.kind = ANY(p_kinds) AND k.rate_n > 0
            ), cand AS (
                SELECT x.id, x.tid, x.slot_key, x.slot_limit, x.slot_policy, x.ord, x.used,
                       CASE WHEN kl.kind IS NOT NULL THEN 'r' || sep || x.kind
                            || CASE WHEN kl.rate_by_part THEN sep || COALESCE(x.part, '') ELSE '' END END AS rkey,
                       kl.rate_n, kl.rate_period
                FROM (SELECT x.*, row_number() OVER (ORDER BY x.priority DESC, x.vt, x.id) AS ord,
                             COALESCE((v_slot_used ->> x.slot_key)::integer, 0) AS used
                      FROM (SELECT x.id, x.ctid AS tid, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.vt
                            FROM venturi_job x
                            WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = p_queue
                              AND x.kind = ANY(p_kinds)
                              AND NOT x.kind = ANY(v_shut)
                              AND (cardinality(v_shut_parts) = 0 OR NOT (x.kind || sep || x.part) = ANY(v_shut_parts))
                              AND (x.slot_key IS NULL OR x.slot_policy <> 0
                                   OR COALESCE((v_slot_used ->> x.slot_key)::integer, 0) < x.slot_limit)
                            ORDER BY x.priority DESC, x.vt, x.id
                            LIMIT GREATEST(p_max + 16, 32)
                            FOR UPDATE SKIP LOCKED) x) x
                LEFT JOIN kl ON kl.kind = x.kind
            ), rates AS MATERIALIZED (
                -- The candidates' rate windows: each one's starts within its period.
                SELECT r.key, r.cap, gt.key IS NULL AS missing,
                       COALESCE((SELECT sum(w.c) FROM unnest(gt.rate_at, gt.rate_n) AS w(at, c)
                                 WHERE w.at > v_check - r.period), 0)::integer AS used
                FROM (SELECT DISTINCT c.rkey AS key, c.rate_n AS cap, c.rate_period AS period FROM cand c
                      WHERE c.rkey IS NOT NULL) r
                LEFT JOIN venturi_gate gt ON gt.key = r.key
            ), passed AS (
                SELECT c.*, rt.missing,
                       c.slot_key IS NULL
                       OR c.used + row_number() OVER (PARTITION BY c.slot_key ORDER BY c.ord) <= c.slot_limit AS slot_ok,
                       c.rkey IS NULL
                       OR rt.used + row_number() OVER (PARTITION BY c.rkey ORDER BY c.ord) <= rt.cap AS rate_ok
                FROM cand c LEFT JOIN rates rt ON rt.key = c.rkey
            ), admitted AS (
                SELECT p.*, p.slot_ok AND p.rate_ok
                            AND row_number() OVER (PARTITION BY p.slot_ok AND p.rate_ok ORDER BY p.ord) <= p_max AS admit
                FROM passed p
            ), judged AS (
                -- A candidate not admitted whose slot is full, counting the claim's admissions
                -- before it: its policy applies. Once the claim has p_max jobs, the candidates
                -- after its last one are left alone (the claim ended there): seen is false.
                SELECT a.*, a.used + count(*) FILTER (WHERE a.admit) OVER (PARTITION BY a.slot_key ORDER BY a.ord
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS running,
                       NOT a.admit AND (count(*) FILTER (WHERE a.admit) OVER () < p_max
                                        OR a.ord < max(a.ord) FILTER (WHERE a.admit) OVER ()) AS seen
                FROM admitted a
            )
            SELECT COALESCE(array_agg(s.id ORDER BY s.ord) FILTER (WHERE s.admit), '{}'),
                   COALESCE(array_agg(s.tid ORDER BY s.ord) FILTER (WHERE s.admit), '{}'),
                   COALESCE(array_agg(s.id ORDER BY s.ord) FILTER (WHERE s.full AND s.slot_policy = 2), '{}'),
                   COALESCE(array_agg(format('dropped: slot %s is full (%s of %s running; policy DropIfRunning)',
                                             s.slot_key, s.running, s.slot_limit) ORDER BY s.ord)
                            FILTER (WHERE s.full AND s.slot_policy = 2), '{}'),
                   COALESCE(array_agg(DISTINCT s.slot_key) FILTER (WHERE s.full AND s.slot_policy = 1), '{}'),
                   COALESCE(array_agg(DISTINCT s.rkey) FILTER (WHERE s.admit AND s.missing), '{}'),
                   COALESCE(array_agg(DISTINCT s.rkey) FILTER (WHERE s.seen AND NOT s.rate_ok), '{}'),
                   COALESCE(array_agg(s.rkey) FILTER (WHERE s.admit AND s.rkey IS NOT NULL), '{}')
            INTO admit, admit_tid, dropped, drop_note, replace_slots, new_gates, blocked, rate_keys
            FROM (SELECT j.*, j.seen AND j.slot_key IS NOT NULL AND j.running >= j.slot_limit AS full FROM judged j) s;
            IF cardinality(rate_keys) > 0 THEN -- one entry per admitted job: count them per gate
                SELECT array_agg(rk.key ORDER BY rk.key), array_agg(rk.n ORDER BY rk.key)
                INTO rate_keys, rate_adm
                FROM (SELECT k AS key, count(*)::integer AS n FROM unnest(rate_keys) AS k GROUP BY k) rk;
            END IF;
        END IF;
        n_admit := cardinality(admit);
        IF n_admit = 0 AND cardinality(dropped) = 0 AND cardinality(replace_slots) = 0
           AND cardinality(blocked) = 0 AND v_wake_pre IS NULL THEN
            RETURN;
        END IF;
        v_now := clock_timestamp();
        v_brk := '{}';
        IF cardinality(new_gates) > 0 THEN
            INSERT INTO venturi_gate (key, kind, part)
            SELECT gkey, split_part(gkey, sep, 2), NULLIF(split_part(gkey, sep, 3), '')
            FROM unnest(new_gates) AS gkey
            ON CONFLICT DO NOTHING;
        END IF;
    ELSE
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
            SELECT x.id, x.ctid AS tid, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.vt
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
            SELECT x.id, x.ctid AS tid, x.kind, x.part, x.slot_key, x.slot_limit, x.slot_policy, x.priority, x.run_at
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
            FROM (SELECT gated.id, gated.tid, gated.kind, gated.part, gated.slot_key, gated.slot_limit, gated.slot_policy,
                         gated.priority, row_number() OVER (PARTITION BY gated.priority ORDER BY gated.vt, gated.id) AS rn,
                         1 AS src FROM gated
                  UNION ALL
                  SELECT plain.id, plain.tid, plain.kind, plain.part, plain.slot_key, plain.slot_limit, plain.slot_policy,
                         plain.priority, row_number() OVER (PARTITION BY plain.priority ORDER BY plain.run_at, plain.id),
                         0 FROM plain) c
        ), ck AS (
            -- Each candidate's gate keys (NULL: not subject to it) and how many it has.
            SELECT cand.ord, cand.id, cand.tid, cand.slot_key, cand.part, cand.slot_limit, cand.slot_policy, g.*,
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
            (SELECT array_agg(ck.tid ORDER BY ck.ord) FROM ck),
            (SELECT array_agg(ck.slot_key ORDER BY ck.ord) FROM ck),
            (SELECT array_agg(ck.slot_limit ORDER BY ck.ord) FROM ck),
            (SELECT array_agg(ck.slot_policy ORDER BY ck.ord) FROM ck),
            (SELECT array_agg(ck.ng ORDER BY ck.ord) FROM ck),
            (SELECT array_agg(gk.gi ORDER BY gk.ord, gk.pos) FROM gk),
            (SELECT array_agg(DISTINCT gk.key ORDER BY gk.key) FROM gk)
        INTO c_id, c_tid, c_slot, c_limit, c_policy, c_off, c_gl, g_key;

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
                admit_tid[n_admit] := c_tid[i];
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
        -- The rate and breaker gates that admitted jobs (rates: how many) and that held a
        -- candidate back, by key.
        SELECT COALESCE(array_agg(g_key[ag.g] ORDER BY g_key[ag.g]) FILTER (WHERE left(g_key[ag.g], 1) = 'r'), '{}'),
               COALESCE(array_agg(ag.n ORDER BY g_key[ag.g]) FILTER (WHERE left(g_key[ag.g], 1) = 'r'), '{}'),
               COALESCE(array_agg(g_key[ag.g] ORDER BY g_key[ag.g]) FILTER (WHERE left(g_key[ag.g], 1) = 'b'), '{}')
        INTO rate_keys, rate_adm, probe_keys
        FROM (SELECT x AS g, count(*)::integer AS n FROM unnest(admit_g) AS x GROUP BY x) ag;
        blocked := ARRAY(SELECT DISTINCT g_key[b] FROM unnest(blocked_g) AS b);
    END IF;

    -- A drop is decided from the running jobs counted before the candidates were read
    -- (v_slot_used), so it is made only if the slot is full in this statement's snapshot
    -- too: its running jobs now plus the jobs of the slot this claim admits.
    IF cardinality(dropped) > 0 THEN
        UPDATE venturi_job x SET
            state = 'cancelled', finished_at = v_now,
            journal = x.journal || jsonb_build_array(jsonb_build_object(
                'event', 'dropped', 'note', d.note, 'at', v_now))
        FROM unnest(dropped, drop_note) AS d(id, note)
        WHERE x.id = d.id
          AND (SELECT count(*) FROM venturi_job h WHERE h.state = 'running' AND h.slot_key = x.slot_key)
              + (SELECT count(*) FROM venturi_job a
                 WHERE a.id = ANY(ARRAY(SELECT unnest(admit))) AND a.slot_key = x.slot_key)
              >= x.slot_limit;
    END IF;

    -- Replace: ask the oldest running job of each full slot to stop, unless one already is
    -- stopping. A locked row is skipped (it is finishing, or another claim asks it). As for
    -- a drop, the slot must be full now too: its running jobs (with the limit they were
    -- claimed under) plus the jobs of the slot this claim admits.
    IF cardinality(replace_slots) > 0 THEN
        FOR r IN
            UPDATE venturi_job x SET stop_requested_at = v_now, stop_event = 'replaced',
                stop_note = 'replaced by a newer job of slot ' || x.slot_key
            WHERE x.id IN (
                SELECT (SELECT h.id FROM venturi_job h
                        WHERE h.state = 'running' AND h.slot_key = rs.s AND h.stop_requested_at IS NULL
                        ORDER BY h.attempted_at, h.id LIMIT 1 FOR UPDATE SKIP LOCKED)
                FROM unnest(replace_slots) AS rs(s)
                CROSS JOIN LATERAL (SELECT count(*) AS n, max(h.slot_limit) AS lim FROM venturi_job h
                                    WHERE h.state = 'running' AND h.slot_key = rs.s) run
                WHERE NOT EXISTS (SELECT 1 FROM venturi_job h2
                                  WHERE h2.state = 'running' AND h2.slot_key = rs.s AND h2.stop_requested_at IS NOT NULL)
                  AND run.n + (SELECT count(*) FROM venturi_job a
                               WHERE a.id = ANY(ARRAY(SELECT unnest(admit))) AND a.slot_key = rs.s) >= run.lim)
            RETURNING x.id
        LOOP
            PERFORM pg_notify(p_channel, chr(31) || 'stop:replaced:' || r.id::text);
        END LOOP;
    END IF;

    IF cardinality(blocked) > 0 THEN
        SELECT min(w.at) INTO v_wake FROM (
            SELECT COALESCE((SELECT min(t.at) FROM unnest(gt.rate_at) AS t(at) WHERE t.at > v_check - k.rate_period),
                            v_now) + k.rate_period AS at
            FROM venturi_gate gt JOIN venturi_kind k ON k.kind = gt.kind
            WHERE gt.key = ANY(blocked) AND left(gt.key, 1) = 'r'
            UNION ALL
            SELECT CASE WHEN gt.open_until > v_check THEN gt.open_until ELSE gt.probe_until END
            FROM venturi_gate gt
            WHERE gt.key = ANY(blocked) AND left(gt.key, 1) = 'b'
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
    -- this fills is full until its oldest start leaves it (full_until: the next claims
    -- pass over its jobs without locking them).
    IF cardinality(rate_keys) > 0 THEN
        -- Each window's starts are read once, from the row being updated.
        UPDATE venturi_gate gt SET
            (rate_at, rate_n, full_until) = (
                SELECT COALESCE(array_agg(t.at ORDER BY t.at), '{}') || v_now,
                       COALESCE(array_agg(t.c ORDER BY t.at), '{}') || ra.admitted,
                       CASE WHEN COALESCE(sum(t.c), 0) + ra.admitted >= k.rate_n
                            THEN COALESCE(min(t.at), v_now) + k.rate_period END
                FROM unnest(gt.rate_at, gt.rate_n) AS t(at, c)
                WHERE t.at > v_now - k.rate_period),
            updated_at = v_now
        FROM unnest(rate_keys, rate_adm) AS ra(key, admitted), venturi_kind k
        WHERE gt.key = ra.key AND k.kind = gt.kind;
    END IF;

    -- Breakers: a half-open breaker that admitted its probe waits for it. Breaker rows are
    -- locked in key order, as venturi_breaker_record locks them.
    IF cardinality(probe_keys) > 0 THEN
        UPDATE venturi_gate gt SET probe_until = v_now + interval '1 microsecond' * p_lease_us, updated_at = v_now
        WHERE gt.key IN (SELECT b.key FROM venturi_gate b
                         WHERE b.key = ANY(probe_keys)
                           AND b.open_until IS NOT NULL AND b.open_until <= v_now
                         ORDER BY b.key FOR UPDATE)
          AND gt.open_until IS NOT NULL AND gt.open_until <= v_now;
    END IF;

    -- The worker's kinds that have a breaker, and whether it is per partition (none on
    -- the slots-and-rates path).
    IF v_brk IS NULL THEN
        SELECT COALESCE(jsonb_object_agg(k.kind, k.brk_by_part), '{}') INTO v_brk
        FROM venturi_kind k WHERE k.kind = ANY(p_kinds) AND k.brk_failures > 0;
    END IF;

    -- The claim writes the started events of the jobs it claims that record events (the
    -- started CTE below), so venturi_event_write must not write them once more: it skips
    -- the move to running while venturi.claim_started_events is on, for this statement.
    v_started := current_setting('venturi.claim_started_events', true);
    PERFORM set_config('venturi.claim_started_events', 'on', true);
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
            -- (not a probe of venturi_kind per claimed row).
            breaker = CASE WHEN v_brk ? x.kind THEN 'b' || sep || x.kind
                           || CASE WHEN (v_brk ->> x.kind)::boolean THEN sep || COALESCE(x.part, '') ELSE '' END END
        -- By tuple ID, as the plain claim updates (a TID scan, not a probe of the primary
        -- key per job, whose depth grows with the table): admit_tid holds the versions the
        -- candidate statement locked, which no other transaction can change while this
        -- one holds their locks, and which this one has not changed (a dropped job is
        -- never admitted). The state check costs nothing and keeps a wrong tuple ID from
        -- ever starting a job twice.
        WHERE x.ctid = ANY(admit_tid) AND x.state = 'available'
        RETURNING x.id, x.kind, x.payload, x.carry, x.runs, x.failures, x.lease_token, x.journal,
                  x.journal_moved, x.attempted_at, x.breaker, x.priority, x.run_at, x.meta, x.queue, x.worker_id, x.events
    ), started AS (
        -- One insert for the claim, and one NOTIFY when it wrote any.
        INSERT INTO venturi_event (job_id, kind, queue, event, run, state, worker, started_at, run_at, meta)
        SELECT c.id, c.kind, c.queue, 'started', c.runs, 'running', c.worker_id, c.attempted_at, c.run_at, c.meta
        FROM claimed c
        WHERE c.events
        RETURNING 1
    ), notified AS (
        SELECT count(pg_notify(venturi_events_channel(), '')) AS n FROM (SELECT 1 FROM started LIMIT 1) s
    )
    SELECT c.id, c.kind, c.payload, c.carry, c.runs, c.failures, c.lease_token, c.journal,
           c.journal_moved, c.attempted_at, c.breaker, NULL::bigint, COALESCE(c.meta, 'null'::jsonb), c.run_at
    FROM claimed c JOIN unnest(admit) WITH ORDINALITY AS a(id, o) ON a.id = c.id
    WHERE (SELECT n.n FROM notified n) >= 0
    ORDER BY a.o;
    PERFORM set_config('venturi.claim_started_events', COALESCE(v_started, ''), true);
    IF v_wake IS NOT NULL THEN
        RETURN QUERY SELECT NULL::uuid, ''::text, NULL::jsonb, NULL::jsonb, 0, 0, 0::bigint, NULL::jsonb, 0::bigint,
            v_now, NULL::text, GREATEST((EXTRACT(EPOCH FROM v_wake - clock_timestamp()) * 1000000)::bigint, 0),
            NULL::jsonb, NULL::timestamptz;
    END IF;
END
$function$;

DROP TRIGGER venturi_event_update ON venturi_job;
CREATE TRIGGER venturi_event_update AFTER UPDATE OF state, journal ON venturi_job
    FOR EACH ROW
    WHEN (new.events
          AND ((old.state IS DISTINCT FROM new.state
                AND NOT (old.state = 'available' AND new.state = 'running'
                         AND current_setting('venturi.claim_started_events', true) IS NOT DISTINCT FROM 'on'))
               OR (old.journal_moved + jsonb_array_length(old.journal)) <> (new.journal_moved + jsonb_array_length(new.journal))))
    EXECUTE FUNCTION venturi_event_write();
