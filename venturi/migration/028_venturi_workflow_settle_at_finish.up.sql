-- venturi schema, version 28: a member's end settles its workflow in the transaction that
-- ends it, when it can.
--
-- A worker's finish names the jobs' wake-up channel for its transaction (SET LOCAL
-- venturi.finish_channel = 'on:' || the channel; 'on:' alone when it polls). Its members'
-- ends are then settled as the transaction commits, by a deferred trigger: once per
-- workflow (the first settle applies every change of the transaction; the others find
-- nothing left), after everything the transaction wrote (a spawner's children included),
-- unless another transaction holds the workflow's row (SKIP LOCKED: a finish never waits
-- for it). What an end releases is claimable when the finish commits, with no hop through
-- a resolver. A held row, or a change made without the setting (a cancel, a rescue, an
-- operator's retry, an older worker's finish), wakes the resolvers as before. A settle
-- marks its transaction as settling (venturi.workflow_settling) while it runs: the member
-- changes it makes itself (decisions, revivals) it applies itself, and the inbox trigger
-- does not wake anyone for them. A workflow's row is locked FOR NO KEY UPDATE (it was FOR
-- UPDATE): a node or an output written for it checks its foreign key with FOR KEY SHARE,
-- which FOR UPDATE blocked, so a completion writing its output (holding its job's row)
-- and CancelWorkflow (holding the workflow's, then locking the job's) deadlocked. A
-- finished workflow's group can no longer be sealed. The settle also initialises new nodes
-- in one statement instead of two, and applies the inbox's plain ends in one statement instead of one each
-- (a 2,000-member fan-in's ends: 287 ms to settle before, see bench/FINDINGS.md).
--
-- Rolling deploy: older workers do not set the channel; the ends of the members they run
-- are settled by the resolvers, one notification later, as under version 27.

-- Records a member's change in the inbox; wakes the resolvers unless the transaction
-- settles its own changes, is settling, or is a worker's finish that settles them as it
-- commits (venturi_workflow_finish_settle).
CREATE OR REPLACE FUNCTION venturi_workflow_note() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_state venturi_job_state;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.state IN ('blocked', 'scheduled', 'available', 'waiting') THEN
            v_state := NULL; -- deleted while pending
        ELSIF OLD.state = 'running' THEN
            -- A run's finish moved it: its end is the history row the same statement wrote
            -- (an AFTER trigger sees it). None: kept for no time, which FinishRuns records.
            SELECT h.state INTO v_state FROM venturi_job_history h WHERE h.id = OLD.id;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
        ELSE
            RETURN NULL; -- an end in place, recorded when it ended, moved by the sweep
        END IF;
        INSERT INTO venturi_workflow_inbox (workflow_id, job_id, to_state) VALUES (OLD.workflow_id, OLD.id, v_state);
        IF OLD.state = 'running' AND current_setting('venturi.finish_channel', true) LIKE 'on:%' THEN
            RETURN NULL; -- settled as the finish commits
        END IF;
    ELSE
        INSERT INTO venturi_workflow_inbox (workflow_id, job_id, to_state) VALUES (NEW.workflow_id, NEW.id, NEW.state);
    END IF;
    IF current_setting('venturi.workflow_settle', true) IS DISTINCT FROM 'on'
       AND current_setting('venturi.workflow_settling', true) IS DISTINCT FROM 'on' THEN
        PERFORM pg_notify(venturi_workflow_channel(), '');
    END IF;
    RETURN NULL;
END
$$;

-- A worker's finish of a member, as its transaction commits: settles the member's
-- workflow if that transaction's changes to it are still in the inbox (the first member
-- of a workflow settles them all) and no other transaction holds its row; else wakes the
-- resolvers.
CREATE FUNCTION venturi_workflow_finish_settle() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_at text := current_setting('venturi.finish_channel', true);
BEGIN
    IF v_at IS NULL OR v_at NOT LIKE 'on:%' THEN
        RETURN NULL; -- not a worker's finish: venturi_workflow_note woke the resolvers
    END IF;
    PERFORM 1 FROM venturi_workflow_inbox i WHERE i.workflow_id = OLD.workflow_id LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL; -- settled already
    END IF;
    PERFORM 1 FROM venturi_workflow w WHERE w.id = OLD.workflow_id FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        PERFORM venturi_workflow_settle_one(OLD.workflow_id, substr(v_at, 4), NULL);
    ELSE
        PERFORM pg_notify(venturi_workflow_channel(), '');
    END IF;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER venturi_workflow_finish AFTER DELETE ON venturi_job
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.workflow_id IS NOT NULL AND OLD.state = 'running')
    EXECUTE FUNCTION venturi_workflow_finish_settle();

-- Settles one workflow, whose row the caller has locked: initialises its new nodes,
-- applies its inbox, re-evaluates the nodes p_touch names (a sealed group, a cancel's
-- decisions to undo), propagates, releases and decides what the counters allow, and
-- finishes or reopens the workflow. Returns how many inbox rows it applied. p_channel:
-- the jobs' NOTIFY channel, told the kind of every job it releases ('' for none).
CREATE OR REPLACE FUNCTION venturi_workflow_settle_one(p_id uuid, p_channel text, p_touch text[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    w       venturi_workflow%ROWTYPE;
    ev      record;
    nd      venturi_workflow_node%ROWTYPE;
    v_run   text;
    v_dec   text;
    applied integer := 0;
    fresh   text[];
    dirty   text[] := COALESCE(p_touch, '{}');  -- nodes whose contribution may have changed
    evals   text[] := COALESCE(p_touch, '{}');  -- nodes whose decision may have changed
    c_nodes text[];
    c_old   "char"[];
    c_new   "char"[];
    v_kind  text;
    v_due   boolean;
    v_event text;
    v_final text;
    v_prev  text;
    v_loops text;            -- enable_nestloop and plan_cache_mode as they were, while a
    v_plans text;            -- large settle changes them
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
    WHERE n.workflow_id = p_id AND n.contrib IS NULL;
    -- A large settle (many new nodes, many changes) is planned for its arrays, and joins
    -- them with the workflow's nodes by hashing: the plans cached for small settles, and
    -- the planner's estimate that a workflow has a few nodes (the statistics of a table of
    -- many small ones, or none of a new one), loop over one side for every row of the other
    -- (2.5 minutes for a 2,000-node enqueue; 115 ms so).
    IF cardinality(fresh) > 64 THEN
        v_loops := current_setting('enable_nestloop');
        v_plans := current_setting('plan_cache_mode');
        PERFORM set_config('enable_nestloop', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    IF fresh IS NOT NULL THEN
        UPDATE venturi_workflow_node n
        SET n_deps = c.n_deps, waiting = c.waiting, n_fail = c.n_fail, n_cancel = c.n_cancel, n_skip = c.n_skip,
            contrib = 'w'
        FROM (
            SELECT f.node,
                   count(u.node)::int AS n_deps,
                   count(u.node) FILTER (WHERE COALESCE(u.contrib, 'w') IN ('w', 'x'))::int AS waiting,
                   count(u.node) FILTER (WHERE u.contrib IN ('x', 'f'))::int AS n_fail,
                   count(u.node) FILTER (WHERE u.contrib = 'c')::int AS n_cancel,
                   count(u.node) FILTER (WHERE u.contrib = 'k')::int AS n_skip
            FROM venturi_workflow_node f
            LEFT JOIN LATERAL unnest(f.deps) AS d(dep) ON true
            LEFT JOIN venturi_workflow_node u ON u.workflow_id = p_id AND u.node = d.dep
            WHERE f.workflow_id = p_id AND f.node = ANY(fresh)
            GROUP BY f.node
        ) c
        WHERE n.workflow_id = p_id AND n.node = c.node;
        UPDATE venturi_workflow_node u SET next = u.next || x.nodes
        FROM (SELECT d.dep, array_agg(f.node ORDER BY f.node) AS nodes
              FROM venturi_workflow_node f, unnest(f.deps) AS d(dep)
              WHERE f.workflow_id = p_id AND f.node = ANY(fresh)
              GROUP BY d.dep) x
        WHERE u.workflow_id = p_id AND u.node = x.dep;
        UPDATE venturi_workflow_node p SET holds = p.holds + x.k
        FROM (SELECT f.parent, count(*)::int AS k FROM venturi_workflow_node f
              WHERE f.workflow_id = p_id AND f.node = ANY(fresh) AND f.parent IS NOT NULL
              GROUP BY f.parent) x
        WHERE p.workflow_id = p_id AND p.node = x.parent;
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
    IF applied > 64 AND v_loops IS NULL THEN
        v_loops := current_setting('enable_nestloop');
        v_plans := current_setting('plan_cache_mode');
        PERFORM set_config('enable_nestloop', 'off', true), set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
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
                SELECT n.node, y.run, y.ord, n.contrib AS old, n.h_fail, n.h_cancel,
                       venturi_workflow_contrib(y.run, n.holds, n.h_fail, n.h_cancel) AS new
                FROM unnest(s_jobs, s_runs) WITH ORDINALITY AS y(job_id, run, ord)
                JOIN venturi_workflow_node n ON n.job_id = y.job_id AND n.workflow_id = p_id
                WHERE NOT (n.run IS NULL AND n.own IS NOT NULL AND y.run = 'cancel')
                  AND n.run IS DISTINCT FROM y.run
            ), upd AS (
                UPDATE venturi_workflow_node n SET run = x.run, own = x.run, released = true, ended_at = now(),
                    contrib = x.new,
                    outcome = CASE WHEN x.new IN ('w', 'x') THEN NULL ELSE venturi_workflow_outcome(x.run, x.h_fail, x.h_cancel) END
                FROM x
                WHERE n.workflow_id = p_id AND n.node = x.node
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
        c_nodes := pre_nodes;
        c_old := pre_old;
        c_new := pre_new;
        pre_nodes := NULL;
        pre_old := NULL;
        pre_new := NULL;
        IF cardinality(dirty) > 0 THEN
            WITH x AS (
                SELECT n.node, n.contrib AS old, c.new, n.outcome AS old_outcome,
                       CASE WHEN c.new IN ('w', 'x') THEN NULL ELSE venturi_workflow_outcome(n.own, n.h_fail, n.h_cancel) END AS outcome
                FROM venturi_workflow_node n,
                     LATERAL (SELECT venturi_workflow_contrib(n.own, n.holds, n.h_fail, n.h_cancel) AS new) c
                WHERE n.workflow_id = p_id AND n.node = ANY(dirty)
            ), ch AS (
                -- (A changed outcome of the same class, a decision relabelled, moves no counter.)
                UPDATE venturi_workflow_node n SET contrib = x.new, outcome = x.outcome
                FROM x
                WHERE n.workflow_id = p_id AND n.node = x.node
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
                FROM c JOIN venturi_workflow_node u ON u.workflow_id = p_id AND u.node = c.node,
                     unnest(u.next) AS t(dn)
                GROUP BY t.dn
            ), upd AS (
                UPDATE venturi_workflow_node n
                SET waiting = n.waiting + d.dw, n_fail = n.n_fail + d.df, n_cancel = n.n_cancel + d.dc, n_skip = n.n_skip + d.dk
                FROM d
                WHERE n.workflow_id = p_id AND n.node = d.dn AND (d.dw, d.df, d.dc, d.dk) <> (0, 0, 0, 0)
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
                FROM c JOIN venturi_workflow_node u ON u.workflow_id = p_id AND u.node = c.node
                WHERE u.parent IS NOT NULL
                GROUP BY u.parent
            ), upd AS (
                UPDATE venturi_workflow_node n
                SET holds = n.holds + d.dw, h_fail = n.h_fail + d.df, h_cancel = n.h_cancel + d.dc
                FROM d
                WHERE n.workflow_id = p_id AND n.node = d.parent AND (d.dw, d.df, d.dc) <> (0, 0, 0)
                RETURNING n.node
            )
            SELECT COALESCE(array_agg(upd.node), '{}') INTO dirty FROM upd;
            UPDATE venturi_workflow
            SET open_nodes = open_nodes + (SELECT sum((c.new IN ('w', 'x'))::int - (c.old IN ('w', 'x'))::int)::int
                                           FROM unnest(c_old, c_new) AS c(old, new))
            WHERE id = p_id;
        END IF;
        IF cardinality(evals) > 0 THEN
            FOR nd IN SELECT * FROM venturi_workflow_node n
                      WHERE n.workflow_id = p_id AND n.node = ANY(evals) ORDER BY n.node
            LOOP
                IF nd.job_id IS NULL THEN
                    -- A group: ok once sealed; cancelled while open in a cancelled workflow.
                    v_dec := CASE WHEN nd.sealed THEN 'ok' WHEN w.cancel_requested_at IS NOT NULL THEN 'cancel' END;
                    IF v_dec IS DISTINCT FROM nd.own THEN
                        UPDATE venturi_workflow_node n SET own = v_dec WHERE n.workflow_id = p_id AND n.node = nd.node;
                        dirty := dirty || nd.node;
                    END IF;
                    CONTINUE;
                END IF;
                CONTINUE WHEN nd.run IS NOT NULL OR nd.released;
                v_dec := venturi_workflow_decide(nd.policy, w.cancel_requested_at IS NOT NULL, nd.n_deps, nd.waiting,
                                                 nd.n_fail, nd.n_cancel, nd.n_skip);
                CONTINUE WHEN v_dec IS NOT DISTINCT FROM nd.own;
                IF nd.own IS NOT NULL AND v_dec IS NOT NULL AND v_dec <> 'release' THEN
                    -- Decided before, decided otherwise now (cancel, then dcancel): the job
                    -- stays cancelled; the node's outcome says why now.
                    UPDATE venturi_workflow_node n SET own = v_dec WHERE n.workflow_id = p_id AND n.node = nd.node;
                    dirty := dirty || nd.node;
                    CONTINUE;
                END IF;
                -- Decided before, free to run or wait now: the job comes back first. A job
                -- that is gone (deleted, pruned) keeps its decision.
                CONTINUE WHEN nd.own IS NOT NULL AND NOT venturi_workflow_revive(nd.job_id, 'what it needs changed');
                IF v_dec = 'release' THEN
                    UPDATE venturi_job j SET
                        state = (CASE WHEN GREATEST(j.run_at, now() + nd.delay_us * interval '1 microsecond') <= now()
                                      THEN 'available' ELSE 'scheduled' END)::venturi_job_state,
                        run_at = GREATEST(j.run_at, now() + nd.delay_us * interval '1 microsecond'),
                        vt = CASE WHEN j.part IS NOT NULL AND GREATEST(j.run_at, now() + nd.delay_us * interval '1 microsecond') <= now()
                                  THEN venturi_job_place(j.queue, j.part, j.priority) ELSE j.vt END,
                        journal = j.journal || jsonb_build_array(jsonb_build_object('event', 'unblocked', 'at', now()))
                    WHERE j.id = nd.job_id AND j.state = 'blocked'
                    RETURNING j.kind, j.state = 'available' INTO v_kind, v_due;
                    IF FOUND AND p_channel <> '' THEN
                        PERFORM pg_notify(p_channel, CASE WHEN v_due THEN v_kind ELSE '@' || v_kind END);
                    END IF;
                    UPDATE venturi_workflow_node n SET released = true, own = NULL, ended_at = NULL
                    WHERE n.workflow_id = p_id AND n.node = nd.node;
                ELSIF v_dec IS NULL THEN
                    UPDATE venturi_workflow_node n SET own = NULL, ended_at = NULL
                    WHERE n.workflow_id = p_id AND n.node = nd.node;
                ELSE
                    v_event := CASE v_dec WHEN 'dfail' THEN 'upstream_failed' WHEN 'dcancel' THEN 'upstream_cancelled'
                                          WHEN 'skip' THEN 'skipped' ELSE 'cancelled' END;
                    UPDATE venturi_job j SET state = 'cancelled', finished_at = now(),
                        journal = j.journal || jsonb_build_array(jsonb_build_object('event', v_event, 'note',
                            CASE v_dec WHEN 'cancel' THEN COALESCE(w.cancel_note, 'workflow cancelled')
                                       WHEN 'skip' THEN 'its policy cannot apply'
                                       ELSE 'something it needs ' || CASE v_dec WHEN 'dfail' THEN 'failed' ELSE 'was cancelled' END
                            END, 'at', now()))
                    WHERE j.id = nd.job_id AND j.state = 'blocked';
                    UPDATE venturi_workflow_node n SET own = v_dec, ended_at = now()
                    WHERE n.workflow_id = p_id AND n.node = nd.node;
                END IF;
                dirty := dirty || nd.node;
            END LOOP;
            evals := '{}';
        END IF;
    END LOOP;

    -- The inbox rows this settle's own job changes wrote (decisions, revivals) are applied.
    DELETE FROM venturi_workflow_inbox i WHERE i.workflow_id = p_id AND i.xid = pg_current_xact_id();

    -- 5. Finished when nothing waits; open again when a retry reopened a node.
    SELECT * INTO w FROM venturi_workflow WHERE id = p_id;
    IF w.open_nodes = 0 AND w.state = 'open' THEN
        v_final := CASE
            WHEN w.fail_fast_tripped OR EXISTS (SELECT 1 FROM venturi_workflow_node n
                                                WHERE n.workflow_id = p_id AND n.own IN ('fail', 'dfail')) THEN 'failed'
            WHEN w.cancel_requested_at IS NOT NULL OR EXISTS (SELECT 1 FROM venturi_workflow_node n
                                                WHERE n.workflow_id = p_id AND n.own IN ('cancel', 'del', 'dcancel')) THEN 'cancelled'
            ELSE 'succeeded' END;
        UPDATE venturi_workflow SET state = v_final, finished_at = now() WHERE id = p_id;
        IF w.await_channel IS NOT NULL THEN
            PERFORM pg_notify(w.await_channel, chr(31) || 'workflow:' || p_id::text);
        END IF;
    ELSIF w.open_nodes > 0 AND w.state <> 'open' THEN
        UPDATE venturi_workflow SET state = 'open', finished_at = NULL WHERE id = p_id;
    END IF;
    PERFORM set_config('venturi.workflow_settling', COALESCE(v_prev, ''), true);
    IF v_loops IS NOT NULL THEN
        PERFORM set_config('enable_nestloop', v_loops, true), set_config('plan_cache_mode', v_plans, true);
    END IF;
    RETURN applied;
END
$$;

-- Settles the given workflows, waiting for each one's row lock in ID order (the caller's
-- transaction recorded their changes: a run's finish, an enqueue, a cancel). Returns how
-- many inbox rows it applied.
CREATE OR REPLACE FUNCTION venturi_workflow_settle(p_ids uuid[], p_channel text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    n    integer := 0;
BEGIN
    FOR v_id IN SELECT w.id FROM venturi_workflow w WHERE w.id = ANY(p_ids) ORDER BY w.id FOR NO KEY UPDATE LOOP
        n := n + venturi_workflow_settle_one(v_id, p_channel, NULL);
    END LOOP;
    RETURN n;
END
$$;

-- The resolvers' pass: settles up to p_max workflows that have inbox rows, skipping those
-- another transaction holds (it settles them); drops the rows of workflows that are gone.
-- Returns how many inbox rows it applied.
CREATE OR REPLACE FUNCTION venturi_workflow_resolve(p_channel text, p_max integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    n    integer := 0;
BEGIN
    FOR v_id IN
        SELECT w.id FROM venturi_workflow w
        WHERE w.id IN (SELECT DISTINCT i.workflow_id FROM venturi_workflow_inbox i LIMIT p_max)
        ORDER BY w.id FOR NO KEY UPDATE SKIP LOCKED
    LOOP
        n := n + venturi_workflow_settle_one(v_id, p_channel, NULL);
    END LOOP;
    DELETE FROM venturi_workflow_inbox i
    WHERE i.workflow_id IN (SELECT DISTINCT x.workflow_id FROM venturi_workflow_inbox x LIMIT p_max)
      AND NOT EXISTS (SELECT 1 FROM venturi_workflow w WHERE w.id = i.workflow_id);
    RETURN n;
END
$$;

-- Seals a group: it takes no more members from outside, and what needs it is released
-- once its members have ended. Returns false when there is no such open group, or the
-- workflow has finished.
CREATE OR REPLACE FUNCTION venturi_workflow_seal(p_id uuid, p_group text, p_channel text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM venturi_workflow w WHERE w.id = p_id AND w.state = 'open' FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false; -- finished (a cancelled one's open group stays as it was)
    END IF;
    UPDATE venturi_workflow_node n SET sealed = true
    WHERE n.workflow_id = p_id AND n.node = p_group AND n.job_id IS NULL AND NOT n.sealed;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM venturi_workflow_settle_one(p_id, p_channel, ARRAY[p_group]);
    RETURN true;
END
$$;

-- Requests a workflow's cancel: its blocked nodes and open groups end cancelled at once,
-- and nothing it adds later is released. Returns the jobs of its members that are
-- released and have not ended, which the caller stops (Queue.CancelWorkflow cancels
-- them as Cancel does, a running one asked to stop), or NULL when there is no such
-- workflow or it has finished.
CREATE OR REPLACE FUNCTION venturi_workflow_cancel(p_id uuid, p_note text, p_channel text) RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    SELECT w.state INTO v_state FROM venturi_workflow w WHERE w.id = p_id FOR NO KEY UPDATE;
    IF v_state IS DISTINCT FROM 'open' THEN
        RETURN NULL;
    END IF;
    UPDATE venturi_workflow SET cancel_requested_at = COALESCE(cancel_requested_at, now()),
        cancel_note = COALESCE(cancel_note, p_note)
    WHERE id = p_id;
    PERFORM venturi_workflow_settle_one(p_id, p_channel, NULL);
    RETURN ARRAY(SELECT n.job_id FROM venturi_workflow_node n
                 WHERE n.workflow_id = p_id AND n.job_id IS NOT NULL AND n.released AND n.run IS NULL
                 ORDER BY n.job_id);
END
$$;
