-- venturi schema, version 27: workflows, graphs of jobs that wait for one another.
--
-- A workflow (venturi_workflow) is a set of nodes (venturi_workflow_node): jobs, and
-- groups, barriers whose members are attached to them. A job node needs other nodes by a
-- policy (0: every one succeeded; 1: every one ended; 2: one failed) and waits in the job
-- state blocked until its policy holds, when it is released (available, or scheduled
-- when it is due later), or can no longer hold, when it ends cancelled without a run,
-- decided (dfail: something it needs failed; dcancel: something it needs was cancelled;
-- skip: its policy cannot apply; cancel: the workflow was cancelled). A job's run may
-- attach nodes to its own (spawns): what needs it waits for them too.
--
-- Readiness is not read from the upstream jobs, which retention prunes: each node keeps
-- counters over what it needs (waiting, n_fail, n_cancel, n_skip) and over what is
-- attached to it (holds, h_fail, h_cancel), and what it adds to them (contrib: w waiting,
-- x waiting with a failure known, s f c k propagated success, failure, cancel, skip). A
-- node propagates when its own outcome is known and nothing attached to it is waiting;
-- a failure is known, and counted by what needs the node, as soon as its own run or an
-- attached node fails. internal/workflowmodel is the reference for these rules, and the
-- tests compare it with this engine.
--
-- Every change of a member's job that matters to its workflow is recorded in
-- venturi_workflow_inbox by a trigger on venturi_job, whoever makes it (a run's finish, a
-- rescue, a cancel, a delete, a retry, an older worker): the job leaving venturi_job for
-- the history, ending in place, being deleted while pending, or coming back from an end.
-- A job outside workflows pays a WHEN test. venturi_workflow_settle, under the workflow's
-- row lock, applies the inbox to the counters and releases or decides what they allow;
-- the transaction that records a change settles it when it can (SET LOCAL
-- venturi.workflow_settle = 'on' tells the trigger not to wake anyone), else the
-- resolvers do, woken by NOTIFY on venturi_workflow_channel().
--
-- Rolling deploy: older workers claim and finish members as they do any job (they never
-- see blocked ones), and the triggers record what their statements do; new workers'
-- resolvers settle it, one notification later. An older worker's bulk retry of a member
-- makes it available rather than blocked: it may run before what it needs ends again;
-- retry members from upgraded processes. Older producers cannot enqueue workflows.

ALTER TABLE venturi_job ADD COLUMN workflow_id uuid;
ALTER TABLE venturi_job_history ADD COLUMN workflow_id uuid;

-- Every job, wherever it is, with its workflow.
CREATE OR REPLACE VIEW venturi_job_all AS
SELECT j.id, j.kind, j.state, j.priority, j.dedup_key, j.payload, j.carry, j.run_at, j.runs, j.failures,
       j.max_failures, j.lease_token, j.lease_expires_at, j.worker_id, j.attempted_at, j.journal,
       j.created_at, j.finished_at, j.journal_moved, j.journal_dropped, j.queue, j.part, j.slot_key,
       j.slot_limit, j.slot_policy, j.breaker, j.stop_requested_at, j.stop_event, j.stop_note,
       j.await_channel, j.wait_signals, j.events, j.meta, false AS in_history, j.workflow_id
FROM venturi_job j
UNION ALL
SELECT h.id, h.kind, h.state, h.priority, h.dedup_key, h.payload, h.carry, h.run_at, h.runs, h.failures,
       h.max_failures, NULL::bigint, NULL::timestamptz, h.worker_id, h.attempted_at,
       CASE WHEN h.derived_token IS NULL THEN h.journal
            ELSE h.journal || jsonb_build_array(venturi_completed_entry(h.runs, h.derived_token, h.worker_id,
                                                                        h.attempted_at, h.derived_run_us)) END,
       h.created_at, h.finished_at, h.journal_moved, h.journal_dropped, h.queue, h.part, h.slot_key,
       h.slot_limit, h.slot_policy, h.breaker, h.stop_requested_at, h.stop_event, h.stop_note,
       NULL::text, NULL::text[], h.events, h.meta, true AS in_history, h.workflow_id
FROM venturi_job_history h;

CREATE INDEX venturi_job_blocked_idx ON venturi_job (id) WHERE state = 'blocked';
CREATE INDEX venturi_job_workflow_idx ON venturi_job (workflow_id) WHERE workflow_id IS NOT NULL;

CREATE TABLE venturi_workflow (
    id                  uuid        PRIMARY KEY,
    -- 0: a workflow; 1: a batch (a group and its callbacks).
    kind                smallint    NOT NULL DEFAULT 0 CHECK (kind IN (0, 1)),
    name                text        NOT NULL DEFAULT '' CHECK (length(name) <= 256),
    key                 text        CHECK (key <> '' AND length(key) <= 512),
    state               text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'succeeded', 'failed', 'cancelled')),
    fail_fast           boolean     NOT NULL DEFAULT false,
    fail_fast_tripped   boolean     NOT NULL DEFAULT false,
    attempt             integer     NOT NULL DEFAULT 1,
    -- Nodes that have not propagated (contrib w or x).
    open_nodes          integer     NOT NULL DEFAULT 0,
    nodes               integer     NOT NULL DEFAULT 0,
    cancel_requested_at timestamptz,
    cancel_note         text,
    await_channel       text,
    meta                jsonb       CHECK (meta IS NULL OR (jsonb_typeof(meta) = 'object' AND octet_length(meta::text) <= 8192)),
    created_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
CREATE UNIQUE INDEX venturi_workflow_key_idx ON venturi_workflow (key) WHERE key IS NOT NULL AND state = 'open';
CREATE INDEX venturi_workflow_finished_idx ON venturi_workflow (finished_at) WHERE state <> 'open';
CREATE INDEX venturi_workflow_cancel_idx ON venturi_workflow (id) WHERE state = 'open' AND cancel_requested_at IS NOT NULL;

CREATE TABLE venturi_workflow_node (
    workflow_id uuid     NOT NULL REFERENCES venturi_workflow (id) ON DELETE CASCADE,
    node        text     NOT NULL CHECK (node <> '' AND length(node) <= 128),
    -- NULL: a group.
    job_id      uuid,
    -- 0: needs every one succeeded; 1: every one ended; 2: one failed.
    policy      smallint NOT NULL DEFAULT 0 CHECK (policy IN (0, 1, 2)),
    deps        text[]   NOT NULL DEFAULT '{}',
    -- What needs this node (propagation follows these).
    next        text[]   NOT NULL DEFAULT '{}',
    -- The group or spawner this node is attached to.
    parent      text,
    n_deps      integer  NOT NULL DEFAULT 0,
    waiting     integer  NOT NULL DEFAULT 0,
    n_fail      integer  NOT NULL DEFAULT 0,
    n_cancel    integer  NOT NULL DEFAULT 0,
    n_skip      integer  NOT NULL DEFAULT 0,
    holds       integer  NOT NULL DEFAULT 0,
    h_fail      integer  NOT NULL DEFAULT 0,
    h_cancel    integer  NOT NULL DEFAULT 0,
    -- Groups: sealed (takes no more members from outside).
    sealed      boolean  NOT NULL DEFAULT true,
    -- Jobs: released to run (blocked no more).
    released    boolean  NOT NULL DEFAULT false,
    -- The job's end: ok fail cancel del (NULL while it has not ended).
    run         text     CHECK (run IN ('ok', 'fail', 'cancel', 'del')),
    -- Its own outcome: the run's, or decided (dfail dcancel skip cancel), or a sealed group's ok.
    own         text     CHECK (own IN ('ok', 'fail', 'cancel', 'del', 'dfail', 'dcancel', 'skip')),
    -- The propagated outcome (NULL until it propagates).
    outcome     text,
    -- What it adds to the counters of what needs it and of its parent; NULL until settled once.
    contrib     "char"   CHECK (contrib IN ('w', 'x', 's', 'f', 'c', 'k')),
    -- Due this long after it is released.
    delay_us    bigint   NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz,
    PRIMARY KEY (workflow_id, node)
) WITH (fillfactor = 80);
CREATE UNIQUE INDEX venturi_workflow_node_job_idx ON venturi_workflow_node (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX venturi_workflow_node_fresh_idx ON venturi_workflow_node (workflow_id) WHERE contrib IS NULL;

-- A job node's output, written by the run whose completion committed.
CREATE TABLE venturi_workflow_output (
    workflow_id uuid        NOT NULL REFERENCES venturi_workflow (id) ON DELETE CASCADE,
    node        text        NOT NULL,
    output      jsonb       NOT NULL,
    token       bigint      NOT NULL,
    written_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, node)
);

-- Member changes not yet settled; normally near empty.
CREATE TABLE venturi_workflow_inbox (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id uuid   NOT NULL,
    job_id      uuid   NOT NULL,
    -- The job's state after the change; NULL: deleted while pending.
    to_state    venturi_job_state,
    xid         xid8   NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX venturi_workflow_inbox_workflow_idx ON venturi_workflow_inbox (workflow_id, seq);
ALTER TABLE venturi_workflow_inbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000);

-- The channel the resolvers listen on, one per schema.
CREATE FUNCTION venturi_workflow_channel() RETURNS text LANGUAGE sql STABLE
AS $$ SELECT 'venturi_workflow_' || md5(current_schema()) $$;

-- Records a member's change in the inbox; wakes the resolvers unless the transaction
-- settles its own changes.
CREATE FUNCTION venturi_workflow_note() RETURNS trigger LANGUAGE plpgsql AS $$
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
    ELSE
        INSERT INTO venturi_workflow_inbox (workflow_id, job_id, to_state) VALUES (NEW.workflow_id, NEW.id, NEW.state);
    END IF;
    IF current_setting('venturi.workflow_settle', true) IS DISTINCT FROM 'on' THEN
        PERFORM pg_notify(venturi_workflow_channel(), '');
    END IF;
    RETURN NULL;
END
$$;

-- Into or out of an end, in place (a cancel, a rescue past the backstop, a stop request,
-- a retry of a job that had not moved).
CREATE TRIGGER venturi_workflow_update AFTER UPDATE OF state ON venturi_job FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state
          AND (OLD.state IN ('completed', 'dead', 'cancelled')) <> (NEW.state IN ('completed', 'dead', 'cancelled')))
    EXECUTE FUNCTION venturi_workflow_note();
-- Back from the history (a retry, a revival): a member inserted with a past.
CREATE TRIGGER venturi_workflow_insert AFTER INSERT ON venturi_job FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL AND NEW.journal <> '[]'::jsonb)
    EXECUTE FUNCTION venturi_workflow_note();
-- Out of venturi_job: a run's finish (an older worker's too, whose history row has no
-- workflow_id), or a delete while pending.
CREATE TRIGGER venturi_workflow_delete AFTER DELETE ON venturi_job FOR EACH ROW
    WHEN (OLD.workflow_id IS NOT NULL)
    EXECUTE FUNCTION venturi_workflow_note();

-- What an outcome counts as for what needs it: s success, f failure, c cancel, k skip.
CREATE FUNCTION venturi_workflow_class(p_outcome text) RETURNS "char" LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (CASE p_outcome WHEN 'ok' THEN 's' WHEN 'fail' THEN 'f' WHEN 'dfail' THEN 'f'
                             WHEN 'skip' THEN 'k' ELSE 'c' END)::"char" $$;

-- A node's propagated outcome: a failure anywhere wins, then its own outcome when it is
-- not a success, then an attached node's cancel.
CREATE FUNCTION venturi_workflow_outcome(p_own text, p_h_fail integer, p_h_cancel integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN p_own IN ('fail', 'dfail') THEN p_own WHEN p_h_fail > 0 THEN 'fail'
                  WHEN p_own <> 'ok' THEN p_own WHEN p_h_cancel > 0 THEN 'cancel' ELSE 'ok' END $$;

-- What a node adds to the counters of what needs it (see the header).
CREATE FUNCTION venturi_workflow_contrib(p_own text, p_holds integer, p_h_fail integer, p_h_cancel integer) RETURNS "char"
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN p_own IS NOT NULL AND p_holds = 0
                  THEN venturi_workflow_class(venturi_workflow_outcome(p_own, p_h_fail, p_h_cancel))
                  WHEN p_own IN ('fail', 'dfail') OR p_h_fail > 0 THEN 'x'::"char" ELSE 'w'::"char" END $$;

-- A blocked job node's decision: 'release', NULL (wait), or the outcome it ends with.
-- What it needs decides first (dfail, dcancel, skip); a cancel of the workflow decides
-- the nodes that could still run or wait (cancel).
CREATE FUNCTION venturi_workflow_decide(p_policy smallint, p_cancel boolean, p_n_deps integer, p_waiting integer,
                                        p_n_fail integer, p_n_cancel integer, p_n_skip integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN d IS NULL OR d = 'release' THEN CASE WHEN p_cancel THEN 'cancel' ELSE d END ELSE d END
FROM (SELECT CASE
    WHEN p_policy = 0 THEN CASE WHEN p_n_fail > 0 THEN 'dfail' WHEN p_n_cancel > 0 THEN 'dcancel'
                                WHEN p_waiting > 0 THEN NULL
                                WHEN p_n_deps > 0 AND p_n_skip = p_n_deps THEN 'skip' ELSE 'release' END
    WHEN p_policy = 1 THEN CASE WHEN p_waiting > 0 THEN NULL
                                WHEN p_n_deps > 0 AND p_n_skip = p_n_deps THEN 'skip' ELSE 'release' END
    ELSE CASE WHEN p_n_fail > 0 THEN 'release' WHEN p_waiting > 0 THEN NULL ELSE 'skip' END
END AS d) x $$;

-- Brings a decided member's job back to blocked: in place while it is in venturi_job,
-- else back from the history. Returns false when the job is in neither (deleted, pruned).
CREATE FUNCTION venturi_workflow_revive(p_job uuid, p_note text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_entry jsonb := jsonb_build_array(jsonb_build_object('event', 'revived', 'note', p_note, 'at', now()));
BEGIN
    UPDATE venturi_job SET state = 'blocked', finished_at = NULL, journal = journal || v_entry
    WHERE id = p_job AND state = 'cancelled';
    IF FOUND THEN
        RETURN true;
    END IF;
    WITH back AS (
        DELETE FROM venturi_job_history h WHERE h.id = p_job RETURNING h.*
    )
    INSERT INTO venturi_job (id, kind, state, priority, dedup_key, payload, carry, run_at, runs, failures,
        max_failures, worker_id, attempted_at, journal, created_at, journal_moved, journal_dropped, queue, part,
        slot_key, slot_limit, slot_policy, breaker, events, meta, workflow_id)
    SELECT b.id, b.kind, 'blocked', b.priority, b.dedup_key, b.payload, b.carry, b.run_at, b.runs, b.failures,
           b.max_failures, b.worker_id, b.attempted_at, b.journal || v_entry, b.created_at, b.journal_moved,
           b.journal_dropped, b.queue, b.part, b.slot_key, b.slot_limit, b.slot_policy, b.breaker, b.events, b.meta,
           b.workflow_id
    FROM back b;
    RETURN FOUND;
END
$$;

-- Settles one workflow, whose row the caller has locked: initialises its new nodes,
-- applies its inbox, re-evaluates the nodes p_touch names (a sealed group, a cancel's
-- decisions to undo), propagates, releases and decides what the counters allow, and
-- finishes or reopens the workflow. Returns how many inbox rows it applied. p_channel:
-- the jobs' NOTIFY channel, told the kind of every job it releases ('' for none).
CREATE FUNCTION venturi_workflow_settle_one(p_id uuid, p_channel text, p_touch text[]) RETURNS integer LANGUAGE plpgsql AS $$
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
BEGIN
    SELECT * INTO w FROM venturi_workflow WHERE id = p_id;
    IF NOT FOUND THEN
        DELETE FROM venturi_workflow_inbox WHERE workflow_id = p_id;
        RETURN 0;
    END IF;

    -- 1. New nodes: their counters from what they need as it stands (a new node counts as
    -- waiting), their deps' next arrays, their parents' holds.
    SELECT array_agg(n.node) INTO fresh FROM venturi_workflow_node n
    WHERE n.workflow_id = p_id AND n.contrib IS NULL;
    IF fresh IS NOT NULL THEN
        UPDATE venturi_workflow_node n
        SET n_deps = c.n_deps, waiting = c.waiting, n_fail = c.n_fail, n_cancel = c.n_cancel, n_skip = c.n_skip
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
        UPDATE venturi_workflow_node n SET contrib = 'w' WHERE n.workflow_id = p_id AND n.node = ANY(fresh);
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

    -- 2. The inbox, in the order the changes were made.
    FOR ev IN
        WITH d AS (DELETE FROM venturi_workflow_inbox i WHERE i.workflow_id = p_id RETURNING i.seq, i.job_id, i.to_state)
        SELECT d.job_id, d.to_state FROM d ORDER BY d.seq
    LOOP
        applied := applied + 1;
        SELECT * INTO nd FROM venturi_workflow_node n WHERE n.job_id = ev.job_id;
        CONTINUE WHEN NOT FOUND OR nd.workflow_id <> p_id;
        v_run := CASE WHEN ev.to_state IS NULL THEN 'del' WHEN ev.to_state = 'completed' THEN 'ok'
                      WHEN ev.to_state = 'dead' THEN 'fail' WHEN ev.to_state = 'cancelled' THEN 'cancel' END;
        IF v_run IS NOT NULL THEN
            -- A decided node's job ending cancelled is the decision itself; an end seen twice
            -- (in place, then moved to the history) counts once.
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
        EXIT WHEN cardinality(dirty) = 0 AND cardinality(evals) = 0;
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
            SELECT array_agg(ch.node), array_agg(ch.old), array_agg(ch.new) INTO c_nodes, c_old, c_new FROM ch;
            dirty := '{}';
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
    RETURN applied;
END
$$;

-- Settles the given workflows, waiting for each one's row lock in ID order (the caller's
-- transaction recorded their changes: a run's finish, an enqueue, a cancel). Returns how
-- many inbox rows it applied.
CREATE FUNCTION venturi_workflow_settle(p_ids uuid[], p_channel text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    n    integer := 0;
BEGIN
    FOR v_id IN SELECT w.id FROM venturi_workflow w WHERE w.id = ANY(p_ids) ORDER BY w.id FOR UPDATE LOOP
        n := n + venturi_workflow_settle_one(v_id, p_channel, NULL);
    END LOOP;
    RETURN n;
END
$$;

-- The resolvers' pass: settles up to p_max workflows that have inbox rows, skipping those
-- another transaction holds (it settles them); drops the rows of workflows that are gone.
-- Returns how many inbox rows it applied.
CREATE FUNCTION venturi_workflow_resolve(p_channel text, p_max integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    n    integer := 0;
BEGIN
    FOR v_id IN
        SELECT w.id FROM venturi_workflow w
        WHERE w.id IN (SELECT DISTINCT i.workflow_id FROM venturi_workflow_inbox i LIMIT p_max)
        ORDER BY w.id FOR UPDATE SKIP LOCKED
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
-- once its members have ended. Returns false when there is no such open group.
CREATE FUNCTION venturi_workflow_seal(p_id uuid, p_group text, p_channel text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM venturi_workflow w WHERE w.id = p_id FOR UPDATE;
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
CREATE FUNCTION venturi_workflow_cancel(p_id uuid, p_note text, p_channel text) RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    SELECT w.state INTO v_state FROM venturi_workflow w WHERE w.id = p_id FOR UPDATE;
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
