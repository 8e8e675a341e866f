-- venturi schema, version 40: a workflow node's later updates can be HOT.
--
-- A settle finds the nodes it has not counted yet by an index on venturi_workflow_node
-- whose predicate was contrib IS NULL; contrib changes again when a member ends, so that
-- update could never be a heap-only (HOT) update: it wrote a new entry into the primary
-- key and the job_id index for every member's end (bench/FINDINGS.md section 31). The
-- index's predicate is now a column of its own, fresh, true when a node is inserted and
-- cleared once by the settle that counts it; no other update of a node changes an
-- indexed column. A node released by a decision is no longer recomputed in the next wave
-- (a release leaves it undecided: its contribution cannot have changed).
--
-- Rolling deploy: older workers insert nodes without naming fresh (the default, true,
-- marks them for the settle) and call the same functions, which this migration replaces.
-- The migration takes a SHARE lock on venturi_workflow_node while it builds the new index
-- (a scan of the table): enqueues of workflows and settles wait for it meanwhile.

ALTER TABLE venturi_workflow_node ADD COLUMN fresh boolean NOT NULL DEFAULT false;
ALTER TABLE venturi_workflow_node ALTER COLUMN fresh SET DEFAULT true;
UPDATE venturi_workflow_node SET fresh = true WHERE contrib IS NULL;
DROP INDEX venturi_workflow_node_fresh_idx;
CREATE INDEX venturi_workflow_node_fresh_idx ON venturi_workflow_node (workflow_id) WHERE fresh;

CREATE OR REPLACE FUNCTION venturi_workflow_settle_one(p_id uuid, p_channel text, p_touch text[])
 RETURNS integer
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    w       venturi_workflow%ROWTYPE;
    ev      record;
    nd      venturi_workflow_node%ROWTYPE;
    v_run   text;
    applied integer := 0;
    fresh   text[];
    dirty   text[] := COALESCE(p_touch, '{}');  -- nodes whose contribution may have changed
    evals   text[] := COALESCE(p_touch, '{}');  -- nodes whose decision may have changed
    c_nodes text[];
    c_old   "char"[];
    c_new   "char"[];
    v_final text;
    v_prev  text;
    ev_jobs   uuid[];
    ev_states venturi_job_state[];
    s_jobs    uuid[];
    s_runs    text[];
    c_jobs    uuid[];
    pre_nodes text[];    -- nodes whose contributions the inbox's plain ends changed
    pre_old   "char"[];
    pre_new   "char"[];
    d_nodes   text[];
    d_old     "char"[];
    d_new     "char"[];
    e_nodes   text[];    -- an evaluation: the nodes whose decision changed,
    e_jobs    uuid[];    -- their jobs (NULL: a group),
    e_decs    text[];    -- their decisions, and
    e_owns    text[];    -- the decisions they had
    e_delays  bigint[];  -- and their delays after what they need
    a_nodes   text[];    -- the nodes whose decision changed, with
    a_acts    text[];    -- what it does (own, release, end, wait) and
    a_decs    text[];    -- the decision
    v_act     text;
    r_jobs    uuid[];    -- the jobs released,
    r_delays  bigint[];  -- with their delays
    x_jobs    uuid[];    -- the jobs decided against running (cancelled, skipped)
    x_decs    text[];
    v_wakes   text[];    -- the kinds released ('@' before a kind scheduled for later)
    v_i       integer;
    v_some    boolean;   -- a decision of the pass changes what others need
BEGIN
    SELECT * INTO w FROM venturi_workflow WHERE id = p_id;
    IF NOT FOUND THEN
        DELETE FROM venturi_workflow_inbox WHERE workflow_id = p_id;
        RETURN 0;
    END IF;
    -- The member changes this settle makes (decisions, revivals) are recorded in the inbox
    -- and applied below: the trigger neither settles them again nor wakes anyone.
    v_prev := current_setting('venturi.workflow_settling', true);
    PERFORM set_config('venturi.workflow_settling', 'on', true);

    -- 1. New nodes: their counters from what they need as it stands (a new node counts as
    -- waiting), their deps' next arrays, their parents' holds.
    SELECT array_agg(n.node) INTO fresh FROM venturi_workflow_node n
    WHERE n.workflow_id = p_id AND n.fresh;
    -- Plans: generic ones, cached per connection, for the small settles most are (a plan
    -- per call costs a handoff about half a millisecond); a statement over more than 64
    -- names is planned for its arrays (a hash join where index probes would take longer).
    -- The function's SET clause restores the setting when it returns.
    IF cardinality(fresh) > 64 THEN
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    IF fresh IS NOT NULL THEN
        UPDATE venturi_workflow_node u SET next = u.next || x.nodes
        FROM (SELECT d.dep, array_agg(f.node ORDER BY f.node) AS nodes
              FROM venturi_workflow_node f, unnest(f.deps) AS d(dep)
              WHERE f.workflow_id = p_id AND f.fresh
              GROUP BY d.dep) x,
             LATERAL (SELECT v.ctid FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = x.dep LIMIT 1) t(tid)
        WHERE u.ctid = t.tid;
        UPDATE venturi_workflow_node p SET holds = p.holds + x.k
        FROM (SELECT f.parent, count(*)::int AS k FROM venturi_workflow_node f
              WHERE f.workflow_id = p_id AND f.fresh AND f.parent IS NOT NULL
              GROUP BY f.parent) x,
             LATERAL (SELECT v.ctid FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = x.parent LIMIT 1) t(tid)
        WHERE p.ctid = t.tid;
        UPDATE venturi_workflow_node n
        SET n_deps = c.n_deps, waiting = c.waiting, n_fail = c.n_fail, n_cancel = c.n_cancel, n_skip = c.n_skip,
            contrib = 'w', fresh = false
        FROM (
            SELECT f.ctid AS tid,
                   count(u.node)::int AS n_deps,
                   count(u.node) FILTER (WHERE COALESCE(u.contrib, 'w') IN ('w', 'x'))::int AS waiting,
                   count(u.node) FILTER (WHERE u.contrib IN ('x', 'f'))::int AS n_fail,
                   count(u.node) FILTER (WHERE u.contrib = 'c')::int AS n_cancel,
                   count(u.node) FILTER (WHERE u.contrib = 'k')::int AS n_skip
            FROM venturi_workflow_node f
            LEFT JOIN LATERAL unnest(f.deps) AS d(dep) ON true
            LEFT JOIN LATERAL (SELECT v.node, v.contrib FROM venturi_workflow_node v
                               WHERE v.workflow_id = p_id AND v.node = d.dep LIMIT 1) u ON true
            WHERE f.workflow_id = p_id AND f.fresh
            GROUP BY f.ctid
        ) c
        WHERE n.ctid = c.tid;
        UPDATE venturi_workflow SET open_nodes = open_nodes + cardinality(fresh), nodes = nodes + cardinality(fresh)
        WHERE id = p_id;
        dirty := dirty || fresh;
        evals := evals || fresh;
    END IF;

    -- 2. The inbox. A job whose changes are all one end (the common case: a run's end,
    -- seen once, or in place and then moved to the history) is applied with the others
    -- like it in one statement; the changes of the other jobs (a retry among them) one at
    -- a time, in the order they were made.
    WITH d AS (DELETE FROM venturi_workflow_inbox i WHERE i.workflow_id = p_id RETURNING i.seq, i.job_id, i.to_state)
    SELECT array_agg(d.job_id ORDER BY d.seq), array_agg(d.to_state ORDER BY d.seq) INTO ev_jobs, ev_states FROM d;
    applied := COALESCE(cardinality(ev_jobs), 0);
    PERFORM set_config('plan_cache_mode', CASE WHEN applied > 64 THEN 'force_custom_plan' ELSE 'force_generic_plan' END, true);
    IF applied > 0 THEN
        SELECT array_agg(e.job_id ORDER BY e.ord) FILTER (WHERE e.simple),
               array_agg(e.run ORDER BY e.ord) FILTER (WHERE e.simple),
               array_agg(e.job_id) FILTER (WHERE NOT e.simple)
        INTO s_jobs, s_runs, c_jobs
        FROM (SELECT u.job_id, min(u.ord) AS ord, min(u.run) AS run,
                     bool_and(u.run IS NOT NULL) AND count(DISTINCT u.run) = 1 AS simple
              FROM (SELECT x.job_id, x.ord,
                           CASE WHEN x.to_state IS NULL THEN 'del' WHEN x.to_state = 'completed' THEN 'ok'
                                WHEN x.to_state = 'dead' THEN 'fail' WHEN x.to_state = 'cancelled' THEN 'cancel' END AS run
                    FROM unnest(ev_jobs, ev_states) WITH ORDINALITY AS x(job_id, to_state, ord)) u
              GROUP BY u.job_id) e;
        IF s_jobs IS NOT NULL THEN
            -- A decided node's job ending cancelled is the decision itself; an end seen
            -- twice counts once. Their new contributions are set here too, and moved to
            -- the counters by the first wave below.
            WITH x AS (
                SELECT n.ctid AS tid, n.node, y.run, y.ord, n.contrib AS old, n.h_fail, n.h_cancel,
                       venturi_workflow_contrib(y.run, n.holds, n.h_fail, n.h_cancel) AS new
                FROM unnest(s_jobs, s_runs) WITH ORDINALITY AS y(job_id, run, ord),
                     LATERAL (SELECT v.ctid, v.* FROM venturi_workflow_node v WHERE v.job_id = y.job_id LIMIT 1) n
                WHERE n.workflow_id = p_id AND NOT (n.run IS NULL AND n.own IS NOT NULL AND y.run = 'cancel')
                  AND n.run IS DISTINCT FROM y.run
            ), upd AS (
                UPDATE venturi_workflow_node n SET run = x.run, own = x.run, released = true, ended_at = now(),
                    contrib = x.new,
                    outcome = CASE WHEN x.new IN ('w', 'x') THEN NULL ELSE venturi_workflow_outcome(x.run, x.h_fail, x.h_cancel) END
                FROM x
                WHERE n.ctid = x.tid
                RETURNING n.node, x.run, x.ord, x.old, x.new
            )
            SELECT array_agg(upd.node ORDER BY upd.ord), array_agg(upd.run ORDER BY upd.ord),
                   array_agg(upd.old ORDER BY upd.ord), array_agg(upd.new ORDER BY upd.ord)
            INTO pre_nodes, s_runs, pre_old, pre_new FROM upd;
            IF pre_nodes IS NOT NULL AND w.fail_fast AND w.cancel_requested_at IS NULL AND 'fail' = ANY(s_runs) THEN
                UPDATE venturi_workflow SET cancel_requested_at = now(), fail_fast_tripped = true,
                    cancel_note = 'fail fast: ' || pre_nodes[array_position(s_runs, 'fail')] || ' is dead'
                WHERE id = p_id RETURNING * INTO w;
            END IF;
        END IF;
        FOR ev IN
            SELECT x.job_id, x.to_state FROM unnest(ev_jobs, ev_states) WITH ORDINALITY AS x(job_id, to_state, ord)
            WHERE x.job_id = ANY(COALESCE(c_jobs, '{}')) ORDER BY x.ord
        LOOP
            SELECT * INTO nd FROM venturi_workflow_node n WHERE n.job_id = ev.job_id;
            CONTINUE WHEN NOT FOUND OR nd.workflow_id <> p_id;
            v_run := CASE WHEN ev.to_state IS NULL THEN 'del' WHEN ev.to_state = 'completed' THEN 'ok'
                          WHEN ev.to_state = 'dead' THEN 'fail' WHEN ev.to_state = 'cancelled' THEN 'cancel' END;
            IF v_run IS NOT NULL THEN
                CONTINUE WHEN nd.run IS NULL AND nd.own IS NOT NULL AND v_run = 'cancel';
                CONTINUE WHEN nd.run IS NOT DISTINCT FROM v_run;
                UPDATE venturi_workflow_node n SET run = v_run, own = v_run, released = true, ended_at = now()
                WHERE n.workflow_id = p_id AND n.node = nd.node;
                dirty := dirty || nd.node;
                IF v_run = 'fail' AND w.fail_fast AND w.cancel_requested_at IS NULL THEN
                    UPDATE venturi_workflow SET cancel_requested_at = now(), fail_fast_tripped = true,
                        cancel_note = 'fail fast: ' || nd.node || ' is dead'
                    WHERE id = p_id RETURNING * INTO w;
                END IF;
            ELSE
                -- Back from an end (a retry): blocked until the rules decide again; released
                -- when an older worker's retry made it available.
                CONTINUE WHEN nd.run IS NULL AND nd.own IS NULL;
                UPDATE venturi_workflow_node n SET run = NULL, own = NULL, ended_at = NULL,
                    released = (ev.to_state <> 'blocked')
                WHERE n.workflow_id = p_id AND n.node = nd.node;
                dirty := dirty || nd.node;
                evals := evals || nd.node;
            END IF;
        END LOOP;
    END IF;

    -- 3. A cancel: every blocked node and open group is decided.
    IF w.cancel_requested_at IS NOT NULL THEN
        evals := evals || ARRAY(
            SELECT n.node FROM venturi_workflow_node n
            WHERE n.workflow_id = p_id AND n.own IS NULL
              AND ((n.job_id IS NOT NULL AND n.run IS NULL AND NOT n.released) OR (n.job_id IS NULL AND NOT n.sealed)));
    END IF;

    -- 4. Waves: contributions that changed move the counters of what needs them and of
    -- their parents; the decisions those counters allow change contributions in turn.
    LOOP
        EXIT WHEN cardinality(dirty) = 0 AND cardinality(evals) = 0 AND pre_nodes IS NULL;
        PERFORM set_config('plan_cache_mode', CASE WHEN GREATEST(cardinality(dirty), cardinality(evals), cardinality(pre_nodes)) > 64
                                                   THEN 'force_custom_plan' ELSE 'force_generic_plan' END, true);
        c_nodes := pre_nodes;
        c_old := pre_old;
        c_new := pre_new;
        pre_nodes := NULL;
        pre_old := NULL;
        pre_new := NULL;
        IF cardinality(dirty) > 0 THEN
            WITH x AS (
                SELECT n.ctid AS tid, n.node, n.contrib AS old, c.new, n.outcome AS old_outcome,
                       CASE WHEN c.new IN ('w', 'x') THEN NULL ELSE venturi_workflow_outcome(n.own, n.h_fail, n.h_cancel) END AS outcome
                FROM (SELECT DISTINCT a.node FROM unnest(dirty) AS a(node)) a,
                     LATERAL (SELECT v.ctid, v.* FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = a.node LIMIT 1) n,
                     LATERAL (SELECT venturi_workflow_contrib(n.own, n.holds, n.h_fail, n.h_cancel) AS new) c
            ), ch AS (
                -- (A changed outcome of the same class, a decision relabelled, moves no counter.)
                UPDATE venturi_workflow_node n SET contrib = x.new, outcome = x.outcome
                FROM x
                WHERE n.ctid = x.tid
                  AND (x.old IS DISTINCT FROM x.new OR x.old_outcome IS DISTINCT FROM x.outcome)
                RETURNING n.node, x.old, x.new
            )
            SELECT array_agg(ch.node), array_agg(ch.old), array_agg(ch.new) INTO d_nodes, d_old, d_new FROM ch;
            dirty := '{}';
            IF d_nodes IS NOT NULL THEN
                c_nodes := COALESCE(c_nodes, '{}') || d_nodes;
                c_old := COALESCE(c_old, '{}') || d_old;
                c_new := COALESCE(c_new, '{}') || d_new;
            END IF;
        END IF;
        IF c_nodes IS NOT NULL THEN
            WITH c AS (
                SELECT * FROM unnest(c_nodes, c_old, c_new) AS c(node, old, new)
            ), d AS (
                SELECT t.dn,
                       sum((c.new IN ('w', 'x'))::int - (c.old IN ('w', 'x'))::int)::int AS dw,
                       sum((c.new IN ('x', 'f'))::int - (c.old IN ('x', 'f'))::int)::int AS df,
                       sum((c.new = 'c')::int - (c.old = 'c')::int)::int AS dc,
                       sum((c.new = 'k')::int - (c.old = 'k')::int)::int AS dk
                FROM c,
                     LATERAL (SELECT v.next FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = c.node LIMIT 1) u,
                     unnest(u.next) AS t(dn)
                GROUP BY t.dn
            ), upd AS (
                UPDATE venturi_workflow_node n
                SET waiting = n.waiting + d.dw, n_fail = n.n_fail + d.df, n_cancel = n.n_cancel + d.dc, n_skip = n.n_skip + d.dk
                FROM d, LATERAL (SELECT v.ctid FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = d.dn LIMIT 1) t(tid)
                WHERE n.ctid = t.tid AND (d.dw, d.df, d.dc, d.dk) <> (0, 0, 0, 0)
                RETURNING n.node
            )
            SELECT evals || COALESCE(array_agg(upd.node), '{}') INTO evals FROM upd;
            WITH c AS (
                SELECT * FROM unnest(c_nodes, c_old, c_new) AS c(node, old, new)
            ), d AS (
                SELECT u.parent,
                       sum((c.new IN ('w', 'x'))::int - (c.old IN ('w', 'x'))::int)::int AS dw,
                       sum((c.new IN ('x', 'f'))::int - (c.old IN ('x', 'f'))::int)::int AS df,
                       sum((c.new = 'c')::int - (c.old = 'c')::int)::int AS dc
                FROM c,
                     LATERAL (SELECT v.parent FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = c.node LIMIT 1) u
                WHERE u.parent IS NOT NULL
                GROUP BY u.parent
            ), upd AS (
                UPDATE venturi_workflow_node n
                SET holds = n.holds + d.dw, h_fail = n.h_fail + d.df, h_cancel = n.h_cancel + d.dc
                FROM d, LATERAL (SELECT v.ctid FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = d.parent LIMIT 1) t(tid)
                WHERE n.ctid = t.tid AND (d.dw, d.df, d.dc) <> (0, 0, 0)
                RETURNING n.node
            )
            SELECT COALESCE(array_agg(upd.node), '{}') INTO dirty FROM upd;
            UPDATE venturi_workflow
            SET open_nodes = open_nodes + (SELECT sum((c.new IN ('w', 'x'))::int - (c.old IN ('w', 'x'))::int)::int
                                           FROM unnest(c_old, c_new) AS c(old, new))
            WHERE id = p_id;
        END IF;
        -- Decisions wait until no contribution is left to recompute (the parents whose
        -- holds this wave changed): a node is decided from everything it needs as it is.
        IF cardinality(evals) > 64 AND cardinality(dirty) = 0 THEN
            PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
        END IF;
        IF cardinality(evals) > 0 AND cardinality(dirty) = 0 THEN
            -- The decisions that changed. A group is ok once sealed, cancelled while open in
            -- a cancelled workflow; a job's node not yet released or ended is decided by
            -- its policy and counters.
            SELECT array_agg(e.node ORDER BY e.node), array_agg(e.job_id ORDER BY e.node),
                   array_agg(e.dec ORDER BY e.node), array_agg(e.own ORDER BY e.node),
                   array_agg(e.delay_us ORDER BY e.node)
            INTO e_nodes, e_jobs, e_decs, e_owns, e_delays
            FROM (SELECT n.node, n.job_id, n.own, n.delay_us,
                         CASE WHEN n.job_id IS NULL
                              THEN CASE WHEN n.sealed THEN 'ok' WHEN w.cancel_requested_at IS NOT NULL THEN 'cancel' END
                              ELSE venturi_workflow_decide(n.policy, w.cancel_requested_at IS NOT NULL, n.n_deps, n.waiting,
                                                           n.n_fail, n.n_cancel, n.n_skip) END AS dec
                  FROM (SELECT DISTINCT a.node FROM unnest(evals) AS a(node)) a,
                       LATERAL (SELECT v.* FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = a.node LIMIT 1) n
                  WHERE n.job_id IS NULL OR (n.run IS NULL AND NOT n.released)) e
            WHERE e.dec IS DISTINCT FROM e.own;
            evals := '{}';
            -- A group's decision, and a decided node decided otherwise (revived, relabelled),
            -- change what others need in ways the same pass cannot see (a member reopened
            -- reopens its group): when there are such, they alone are applied now, and the
            -- other decisions wait for the next pass, after the change has propagated.
            -- Releases and ends of undecided nodes only add ended contributions, which no
            -- decision of the same pass depends on. A decided node revived to run is
            -- revived to wait, and decided again in the next pass: what it needs may be
            -- revived by the same pass (a retry revives a node and what needs its end, a
            -- spawner's children and what needs the spawner), and its counters are right
            -- only once that has propagated.
            v_some := false;
            FOR v_i IN 1 .. COALESCE(cardinality(e_nodes), 0) LOOP
                IF e_jobs[v_i] IS NULL OR e_owns[v_i] IS NOT NULL THEN
                    v_some := true;
                    EXIT;
                END IF;
            END LOOP;
            -- What each decision does: 'own' sets the decision alone (a group; a decided
            -- node decided otherwise, cancel then dcancel: its job stays cancelled, its
            -- outcome says why now); 'release' makes the job available; 'end' cancels it;
            -- 'wait' undecides it.
            a_nodes := '{}'; a_acts := '{}'; a_decs := '{}';
            r_jobs := '{}'; r_delays := '{}'; x_jobs := '{}'; x_decs := '{}';
            FOR v_i IN 1 .. COALESCE(cardinality(e_nodes), 0) LOOP
                IF v_some AND e_jobs[v_i] IS NOT NULL AND e_owns[v_i] IS NULL THEN
                    evals := evals || e_nodes[v_i]; -- decided in the next pass
                    CONTINUE;
                END IF;
                IF e_jobs[v_i] IS NULL OR (e_owns[v_i] IS NOT NULL AND e_decs[v_i] <> 'release') THEN
                    v_act := 'own';
                ELSE
                    -- Decided before, free to run or wait now: the job comes back first. A
                    -- job that is gone (deleted, pruned) keeps its decision.
                    CONTINUE WHEN e_owns[v_i] IS NOT NULL AND NOT venturi_workflow_revive(e_jobs[v_i], 'what it needs changed');
                    v_act := CASE WHEN e_decs[v_i] = 'release' AND e_owns[v_i] IS NULL THEN 'release'
                                  WHEN e_decs[v_i] = 'release' OR e_decs[v_i] IS NULL THEN 'wait' ELSE 'end' END;
                    IF e_decs[v_i] = 'release' AND e_owns[v_i] IS NOT NULL THEN
                        evals := evals || e_nodes[v_i]; -- revived to wait: decided in the next pass
                    END IF;
                END IF;
                a_nodes := a_nodes || e_nodes[v_i];
                a_acts := a_acts || v_act;
                a_decs := a_decs || e_decs[v_i];
                IF v_act = 'release' THEN
                    r_jobs := r_jobs || e_jobs[v_i];
                    r_delays := r_delays || e_delays[v_i];
                ELSIF v_act = 'end' THEN
                    x_jobs := x_jobs || e_jobs[v_i];
                    x_decs := x_decs || e_decs[v_i];
                END IF;
            END LOOP;
            -- Released: the job becomes available (scheduled while its delay runs), a gated
            -- job behind its partition's pending ones; each kind released is told once.
            IF cardinality(r_jobs) > 0 THEN
                WITH upd AS (
                    UPDATE venturi_job j SET
                        state = (CASE WHEN GREATEST(j.run_at, now() + x.delay_us * interval '1 microsecond') <= now()
                                      THEN 'available' ELSE 'scheduled' END)::venturi_job_state,
                        run_at = GREATEST(j.run_at, now() + x.delay_us * interval '1 microsecond'),
                        vt = CASE WHEN j.part IS NOT NULL AND GREATEST(j.run_at, now() + x.delay_us * interval '1 microsecond') <= now()
                                  THEN venturi_job_place(j.queue, j.part, j.priority) ELSE j.vt END,
                        journal = j.journal || jsonb_build_array(jsonb_build_object('event', 'unblocked', 'at', now()))
                    FROM unnest(r_jobs, r_delays) AS x(job_id, delay_us)
                    WHERE j.id = x.job_id AND j.state = 'blocked'
                    RETURNING CASE WHEN j.state = 'available' THEN j.kind ELSE '@' || j.kind END AS wake
                )
                SELECT array_agg(DISTINCT upd.wake) INTO v_wakes FROM upd;
                IF p_channel <> '' THEN
                    PERFORM pg_notify(p_channel, k.wake) FROM unnest(v_wakes) AS k(wake);
                END IF;
            END IF;
            -- Decided against running: the job ends cancelled, its journal saying why.
            IF cardinality(x_jobs) > 0 THEN
                UPDATE venturi_job j SET state = 'cancelled', finished_at = now(),
                    journal = j.journal || jsonb_build_array(jsonb_build_object(
                        'event', CASE x.dec WHEN 'dfail' THEN 'upstream_failed' WHEN 'dcancel' THEN 'upstream_cancelled'
                                            WHEN 'skip' THEN 'skipped' ELSE 'cancelled' END,
                        'note', CASE x.dec WHEN 'cancel' THEN COALESCE(w.cancel_note, 'workflow cancelled')
                                           WHEN 'skip' THEN 'its policy cannot apply'
                                           ELSE 'something it needs ' || CASE x.dec WHEN 'dfail' THEN 'failed' ELSE 'was cancelled' END
                                END,
                        'at', now()))
                FROM unnest(x_jobs, x_decs) AS x(job_id, dec)
                WHERE j.id = x.job_id AND j.state = 'blocked';
            END IF;
            -- The nodes: their decisions, and the contributions they may have changed.
            IF cardinality(a_nodes) > 0 THEN
                UPDATE venturi_workflow_node n SET
                    own = CASE WHEN x.act IN ('release', 'wait') THEN NULL ELSE x.dec END,
                    released = n.released OR x.act = 'release',
                    ended_at = CASE x.act WHEN 'own' THEN n.ended_at WHEN 'end' THEN now() END
                FROM unnest(a_nodes, a_acts, a_decs) AS x(node, act, dec),
                     LATERAL (SELECT v.ctid FROM venturi_workflow_node v WHERE v.workflow_id = p_id AND v.node = x.node LIMIT 1) t(tid)
                WHERE n.ctid = t.tid;
                -- (A release leaves the node undecided: its contribution does not change.)
                dirty := dirty || ARRAY(SELECT x.node FROM unnest(a_nodes, a_acts) AS x(node, act) WHERE x.act <> 'release');
            END IF;
        END IF;
    END LOOP;

    -- The inbox rows this settle's own job changes wrote (decisions, revivals) are applied.
    DELETE FROM venturi_workflow_inbox i WHERE i.workflow_id = p_id AND i.xid = pg_current_xact_id();

    -- 5. Finished when nothing waits; open again when a retry reopened a node.
    SELECT * INTO w FROM venturi_workflow WHERE id = p_id;
    IF w.open_nodes = 0 THEN
        -- (Computed again when it is finished already: members retried and decided again
        -- in one settle, a retry in a cancelled workflow, may change its outcome.)
        v_final := CASE
            WHEN w.fail_fast_tripped OR EXISTS (SELECT 1 FROM venturi_workflow_node n
                                                WHERE n.workflow_id = p_id AND n.own IN ('fail', 'dfail')) THEN 'failed'
            WHEN w.cancel_requested_at IS NOT NULL OR EXISTS (SELECT 1 FROM venturi_workflow_node n
                                                WHERE n.workflow_id = p_id AND n.own IN ('cancel', 'del', 'dcancel')) THEN 'cancelled'
            ELSE 'succeeded' END;
        IF w.state = 'open' THEN
            UPDATE venturi_workflow SET state = v_final, finished_at = now() WHERE id = p_id;
            IF w.await_channel IS NOT NULL THEN
                PERFORM pg_notify(w.await_channel, chr(31) || 'workflow:' || p_id::text);
            END IF;
        ELSIF w.state <> v_final THEN
            UPDATE venturi_workflow SET state = v_final WHERE id = p_id;
        END IF;
    ELSIF w.open_nodes > 0 AND w.state <> 'open' THEN
        UPDATE venturi_workflow SET state = 'open', finished_at = NULL WHERE id = p_id;
    END IF;
    PERFORM set_config('venturi.workflow_settling', COALESCE(v_prev, ''), true);
    RETURN applied;
END
$function$;
