package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Workflows, batches and chunks in the workload (README.md, "Workflows, batches and
// chunks"). The driver scripts them with the rest of the workload, before any worker runs;
// while the workload runs it cancels some workflows, retries the failed ones it planned
// to, adds members to open batches and seals them (runWfOps). A second schema, the
// retention schema, runs a few workflows under workers that keep completed jobs
// retainCompleted, so that their members are pruned while the workflows run.

const (
	// retainCompleted is the retention schema's workers' RetainCompleted: a completed
	// member is dropped with its history partition (a minute wide) at the next minute.
	retainCompleted = 2 * time.Second
	// retainDelay is how long after its upstream a retention workflow's "late" node is
	// due (DelayAfterDeps): its upstream's jobs end just before a minute, and it reads
	// their outputs after their partition was dropped.
	retainDelay = 10 * time.Second
	// retainConcurrency is the handlers of each retention schema worker.
	retainConcurrency = 4
	// enqueueWave is the spacing of the workload's due times (driver.go, enqueue).
	enqueueWave = 250 * time.Millisecond
)

// wfSchema is the workflow evidence of the application schema (both schemas).
const wfSchema = `
-- The driver's script of each workflow and batch, and of each member it enqueued.
CREATE TABLE chaos_wf (
    wf_id     uuid PRIMARY KEY,
    seq       bigint NOT NULL,
    batch     boolean NOT NULL,
    plan      text NOT NULL DEFAULT '', -- cancel | retry | ''
    open      boolean NOT NULL DEFAULT false,
    fail_fast boolean NOT NULL DEFAULT false
);
CREATE TABLE chaos_wf_member (
    job_id uuid PRIMARY KEY,
    wf_id  uuid NOT NULL,
    node   text NOT NULL,
    script text NOT NULL,
    root   boolean NOT NULL,          -- released as it was written (a node of the enqueue that needs nothing)
    spawns int NOT NULL DEFAULT -1    -- a spawner: how many nodes it spawns when it completes
);
-- What the driver did to the workflows: cancel, retry (written before the retry, read by
-- the members scripted once), retried, add, seal; at and done: the call and its return.
CREATE TABLE chaos_wf_op (
    wf_id uuid NOT NULL,
    op    text NOT NULL,
    at    timestamptz NOT NULL,
    done  timestamptz,
    err   text NOT NULL DEFAULT '',
    n     int NOT NULL DEFAULT 0
);
CREATE INDEX ON chaos_wf_op (wf_id);
-- Each output a member's run read (Run.UpstreamOutputs), with the token it holds, in an
-- autocommit statement before its work; node '' marks a read done.
CREATE TABLE chaos_wf_read (
    job_id    uuid NOT NULL,
    run       int NOT NULL,
    token     bigint NOT NULL,
    node      text NOT NULL,
    out_token bigint NOT NULL,
    pruned    boolean NOT NULL, -- the node's job was already pruned (retention schema)
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ON chaos_wf_read (job_id);
-- The nodes a member spawned (kind spawn) and the members it added to its batch (add), in
-- its completion's transaction.
CREATE TABLE chaos_spawn (
    job_id uuid NOT NULL,
    run    int NOT NULL,
    token  bigint NOT NULL,
    kind   text NOT NULL,
    node   text NOT NULL,
    child  uuid NOT NULL,
    script text NOT NULL
);
-- A callback's counts (Run.Batch), in its completion's transaction.
CREATE TABLE chaos_cb (
    job_id    uuid NOT NULL,
    run       int NOT NULL,
    token     bigint NOT NULL,
    which     text NOT NULL,
    total     int NOT NULL,
    succeeded int NOT NULL,
    failed    int NOT NULL,
    cancelled int NOT NULL,
    pending   int NOT NULL
);
-- Each item of each chunk call: what the call gave it, and whether the call panicked.
CREATE TABLE chaos_chunk_item (
    call   text NOT NULL,
    job_id uuid NOT NULL,
    run    int NOT NULL,
    token  bigint NOT NULL,
    size   int NOT NULL,
    set    text NOT NULL,
    panic  boolean NOT NULL
);
CREATE INDEX ON chaos_chunk_item (job_id);`

// archiveSchema keeps, in the retention schema, the rows of the workflows retention
// prunes (a succeeded one retainCompleted after it finished, with its nodes and outputs):
// the checker holds them to the invariants as they were when pruned.
const archiveSchema = `
CREATE TABLE chaos_wf_archive (LIKE venturi_workflow);
CREATE TABLE chaos_wf_node_archive (LIKE venturi_workflow_node);
CREATE TABLE chaos_wf_output_archive (LIKE venturi_workflow_output);
CREATE FUNCTION chaos_archive() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO %I SELECT ($1).*', TG_ARGV[0]) USING OLD;
    RETURN OLD;
END
$$;
CREATE TRIGGER chaos_archive BEFORE DELETE ON venturi_workflow FOR EACH ROW EXECUTE FUNCTION chaos_archive('chaos_wf_archive');
CREATE TRIGGER chaos_archive BEFORE DELETE ON venturi_workflow_node FOR EACH ROW EXECUTE FUNCTION chaos_archive('chaos_wf_node_archive');
CREATE TRIGGER chaos_archive BEFORE DELETE ON venturi_workflow_output FOR EACH ROW EXECUTE FUNCTION chaos_archive('chaos_wf_output_archive');`

// wfMember is a node of a scripted workflow or batch, with its job once enqueued.
type wfMember struct {
	node     string
	scenario string
	script   string
	root     bool
	spawns   int // a spawner's children; -1: not a spawner
	job      ulid.ULID
}

// wfAdd is a driver's AddToBatch: n members, at a time after the workers started.
type wfAdd struct {
	at time.Duration
	n  int
}

// wfPlan is a scripted workflow or batch, with what the driver does to it.
type wfPlan struct {
	seq      int64
	batch    bool
	wf       *venturi.Workflow
	b        *venturi.Batch
	members  []*wfMember
	plan     string        // cancel | retry | ""
	due      time.Duration // its wave: after its enqueue (at)
	at       time.Time     // when it was enqueued
	opAt     time.Duration // cancel: after it is due (or the workers started, when later)
	open     bool          // an open batch: adds, then a seal
	adds     []wfAdd
	sealAt   time.Duration // after it is due, as opAt; the adds' too
	failFast bool
	id       ulid.ULID
	workMs   int
}

// wfOpRecord is what the driver did to a workflow, saved to chaos_wf_op at the end.
type wfOpRecord struct {
	wf       ulid.ULID
	op       string
	at, done time.Time
	err      string
	n        int
}

// wfState is the driver's workflow state: the plans, the operations it did, the
// retention schema and the deadlock count.
type wfState struct {
	plans  []*wfPlan
	retain []*wfPlan // the retention schema's
	mu     sync.Mutex
	ops    []wfOpRecord
	nWf    int // workflows scripted so far: the operations and shapes go round them
	nBatch int // batches scripted so far

	rpool   *pgxpool.Pool // the retention schema, when the run has one
	rschema string

	dlMu      sync.Mutex
	deadlocks int64 // pg_stat_database.deadlocks over the run (sampled)
	dlLast    int64
	dlSampled bool
}

func (s *wfState) record(r wfOpRecord) {
	s.mu.Lock()
	s.ops = append(s.ops, r)
	s.mu.Unlock()
}

// wfOn says whether the run has workflows: every mode but the rolling deploy (whose older
// workers know nothing of them) and the overload (its own workload).
func (d *driver) wfOn() bool { return d.roll == nil && d.o.overload == 0 }

// retainSchema is the retention schema's name.
func (d *driver) retainSchema() string { return d.o.schema + "_retain" }

// wfPolicy is a node option of a policy for deps.
func wfPolicy(p int, deps []venturi.Node) venturi.NodeOption {
	switch p {
	case 1:
		return venturi.NeedsEnded(deps...)
	case 2:
		return venturi.NeedsFailure(deps...)
	}
	return venturi.Needs(deps...)
}

// wfScript picks a member's script; retry plans have no permanent member (a retry runs
// every failed job again), the member scripted once fails until the retry instead.
func (d *driver) wfScript(plan string) (string, int) {
	switch x := d.rng.IntN(100); {
	case x < 12:
		return wfTransient, 1 + d.rng.IntN(2)
	case x < 25 && plan != "retry":
		return wfPermanent, 0
	}
	return wfOK, 0
}

// scriptWorkflow scripts a workflow of 4-8 job nodes, due in wave w: random dependencies
// on earlier nodes with the three policies. The shapes and operations go round the
// workflows, so that a short run has each: every third has a group of 2-3 members and
// every third a spawner of 0-4 children; every fourth is FailFast; of every five, one is
// cancelled by the driver 0.05-0.55 s after it is due (while it runs), and one has a member
// that fails until the driver retries the workflow. It returns the number of jobs
// enqueued with it.
func (d *driver) scriptWorkflow(seq int64, w int, workMs int) int {
	pl := &wfPlan{seq: seq, workMs: workMs, due: time.Duration(w) * enqueueWave}
	k := d.wf.nWf
	d.wf.nWf++
	switch k % 5 {
	case 1:
		pl.plan = "cancel"
		pl.opAt = time.Duration(50+d.rng.IntN(500)) * time.Millisecond
	case 3:
		pl.plan = "retry"
	}
	pl.failFast = k%4 == 2
	var opts []venturi.WorkflowOption
	if pl.failFast {
		opts = append(opts, venturi.FailFast())
	}
	wf := venturi.NewWorkflow(fmt.Sprintf("chaos %d", seq), opts...)
	after := venturi.With(venturi.After(time.Duration(w) * enqueueWave))
	n := 4 + d.rng.IntN(5)
	once, spawner, group := -1, -1, -1
	if pl.plan == "retry" {
		once = d.rng.IntN(n)
	}
	if k%3 == 0 {
		spawner = 1 + d.rng.IntN(n-1)
	}
	if k%3 == 1 {
		group = 1 + d.rng.IntN(n-2)
	}
	var cands []venturi.Node
	add := func(name string, t WfTask, root bool, opts ...venturi.NodeOption) venturi.Node {
		m := &wfMember{node: name, scenario: scWorkflow, script: t.Script, root: root, spawns: -1}
		if t.Spawner {
			m.spawns = len(t.Spawn)
		}
		pl.members = append(pl.members, m)
		return wf.Add(name, t, append(opts, after)...)
	}
	var g venturi.Node
	for i := range n {
		if i == group {
			g = wf.Group("g")
			for k := range 2 + d.rng.IntN(2) {
				s, f := d.wfScript(pl.plan)
				var o []venturi.NodeOption
				if d.rng.IntN(2) == 0 {
					o = append(o, venturi.Needs(cands[d.rng.IntN(len(cands))]))
				}
				add(fmt.Sprintf("g%d", k), WfTask{Seq: seq, Script: s, Fails: f, WorkMs: workMs}, len(o) == 0, append(o, venturi.In(g))...)
			}
		}
		s, f := d.wfScript(pl.plan)
		if i == once {
			s, f = wfOnce, 0
		}
		t := WfTask{Seq: seq, Script: s, Fails: f, WorkMs: workMs}
		var deps []venturi.Node
		if i > 0 {
			pool := slices.Clone(cands)
			d.rng.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
			deps = pool[:d.rng.IntN(min(len(pool), 3)+1)]
		}
		if i == group+1 && group >= 0 && !slices.ContainsFunc(deps, func(x venturi.Node) bool { return x.Name() == "g" }) {
			deps = append(deps, g) // something needs the group
		}
		policy := 0
		if len(deps) > 0 {
			switch x := d.rng.IntN(100); {
			case x < 15:
				policy = 1
			case x < 30:
				policy = 2
			}
		}
		if i == spawner && policy != 2 {
			t.Spawner = true
			for c := range d.rng.IntN(5) {
				cs := wfOK
				if d.rng.IntN(7) == 0 && pl.plan != "retry" {
					cs = wfPermanent
				}
				ch := WfChild{Name: fmt.Sprintf("c%d", c), Script: cs}
				if c > 0 && d.rng.IntN(3) == 0 {
					ch.Needs = fmt.Sprintf("c%d", c-1)
				}
				t.Spawn = append(t.Spawn, ch)
			}
		}
		var o []venturi.NodeOption
		if len(deps) > 0 {
			o = append(o, wfPolicy(policy, deps))
		}
		cands = append(cands, add(fmt.Sprintf("n%d", i), t, len(deps) == 0, o...))
		if i == group {
			cands = append(cands, g)
		}
	}
	pl.wf = wf
	d.wf.plans = append(d.wf.plans, pl)
	return len(pl.members)
}

// scriptBatch scripts a batch of 3-8 members with its callbacks (each in most batches),
// due in wave w. Every third is open: fewer members at first, two AddToBatch calls of the
// driver and a member that adds members itself (AddToBatchTx), then the seal. Every
// fourth is cancelled by the driver 0.05-0.75 s after it is due. It returns the number of
// jobs enqueued with it.
func (d *driver) scriptBatch(seq int64, w int, workMs int) int {
	k := d.wf.nBatch
	d.wf.nBatch++
	pl := &wfPlan{seq: seq, batch: true, workMs: workMs, open: k%3 == 1, due: time.Duration(w) * enqueueWave}
	base := pl.due
	if k%4 == 2 {
		pl.plan = "cancel"
		pl.opAt = time.Duration(50+d.rng.IntN(700)) * time.Millisecond
	}
	var opts []venturi.BatchOption
	for _, c := range []struct {
		which string
		opt   func(venturi.Task) venturi.BatchOption
	}{{venturi.BatchOnSuccess, venturi.OnSuccess}, {venturi.BatchOnEnd, venturi.OnEnd}, {venturi.BatchOnFailure, venturi.OnFailure}} {
		if d.rng.IntN(7) == 0 {
			continue
		}
		opts = append(opts, c.opt(WfCallback{Seq: seq, Which: c.which, WorkMs: workMs}))
		pl.members = append(pl.members, &wfMember{node: c.which, scenario: scCallback, script: wfOK, spawns: -1})
	}
	if pl.open {
		opts = append(opts, venturi.OpenBatch())
		var last time.Duration
		for range 2 {
			last += time.Duration(300+d.rng.IntN(1200)) * time.Millisecond
			pl.adds = append(pl.adds, wfAdd{at: last, n: 1 + d.rng.IntN(3)})
		}
		pl.sealAt = last + time.Duration(300+d.rng.IntN(1200))*time.Millisecond
	}
	b := venturi.NewBatch(fmt.Sprintf("chaos batch %d", seq), opts...)
	nm := 3 + d.rng.IntN(6)
	if pl.open {
		nm = 1 + d.rng.IntN(3)
	}
	for i := range nm {
		s, f := d.wfScript("")
		t := WfTask{Seq: seq, Script: s, Fails: f, WorkMs: workMs}
		if pl.open && i == 0 {
			t.Script, t.Adds = wfOK, 1+d.rng.IntN(2)
		}
		m := &wfMember{scenario: scBatch, script: t.Script, root: true, spawns: -1}
		if i == nm-1 && d.rng.IntN(4) == 0 {
			t.Spawner = true
			for c := range 1 + d.rng.IntN(2) {
				t.Spawn = append(t.Spawn, WfChild{Name: fmt.Sprintf("c%d", c), Script: wfOK})
			}
			m.spawns = len(t.Spawn)
		}
		m.job = b.Add(t, venturi.After(base))
		m.node = m.job.String()
		pl.members = append(pl.members, m)
	}
	pl.b = b
	d.wf.plans = append(d.wf.plans, pl)
	return len(pl.members)
}

// chunkBurst scripts a burst of 5-12 chunk jobs of one partition, all due in one wave: a
// chunk holds up to chunkSize of them (the kind's concurrency). A third of the bursts have
// a job that makes its first call panic.
func (d *driver) chunkBurst(seq int64) []flowTask {
	part := chunkParts[d.rng.IntN(len(chunkParts))]
	n := 5 + d.rng.IntN(8)
	panicAt := -1
	if d.rng.IntN(3) == 0 {
		panicAt = d.rng.IntN(n)
	}
	var out []flowTask
	for i := range n {
		set, state := chunkOK, "completed"
		switch x := d.rng.IntN(100); {
		case x < 35:
			set = chunkUnset
		case x < 45:
			set = chunkTransient
		case x < 55:
			set, state = chunkFail, "dead"
		}
		j := ChunkJob{Seq: seq, Part: part, Set: set, WorkMs: 20 + d.rng.IntN(60)}
		if i == panicAt {
			j.Set, j.Panic, state = chunkUnset, true, "completed"
		}
		out = append(out, flowTask{t: j, e: expect{scenario: scChunk, state: state, part: part, group: fmt.Sprintf("chunk-%d", seq)}})
	}
	return out
}

var chunkParts = []string{"chunk-a", "chunk-b"}

// enqueueWorkflows writes the scripted workflows and batches (after the plain jobs) and
// returns their members' expectations; writeWfScripts saves the scripts.
func (d *driver) enqueueWorkflows(ctx context.Context, q *venturi.Queue, plans []*wfPlan, seq *int64) ([]expect, error) {
	var out []expect
	for _, pl := range plans {
		pl.at = time.Now() // its roots are due pl.due after this (a little later)
		if pl.batch {
			res, err := q.EnqueueBatch(ctx, pl.b)
			if err != nil {
				return nil, fmt.Errorf("batch %d: %w", pl.seq, err)
			}
			pl.id = res.ID
			jobs, err := nodeJobs(ctx, q, res.ID)
			if err != nil {
				return nil, err
			}
			for _, m := range pl.members {
				if m.scenario == scCallback {
					m.job = jobs[m.node]
				}
			}
		} else {
			res, err := q.EnqueueWorkflow(ctx, pl.wf)
			if err != nil {
				return nil, fmt.Errorf("workflow %d: %w", pl.seq, err)
			}
			pl.id = res.ID
			for _, m := range pl.members {
				m.job = res.Jobs[m.node]
			}
		}
		for _, m := range pl.members {
			if m.job == (ulid.ULID{}) {
				return nil, fmt.Errorf("workflow %d: node %s has no job", pl.seq, m.node)
			}
			*seq++
			out = append(out, expect{id: m.job, seq: *seq, scenario: m.scenario, state: "completed|dead|cancelled", group: pl.id.String()})
		}
	}
	return out, nil
}

// nodeJobs maps the job nodes of workflow id to their jobs.
func nodeJobs(ctx context.Context, q *venturi.Queue, id ulid.ULID) (map[string]ulid.ULID, error) {
	nodes, err := q.WorkflowNodes(ctx, id, "", 1000)
	if err != nil {
		return nil, err
	}
	out := map[string]ulid.ULID{}
	for _, n := range nodes {
		if !n.Group {
			out[n.Name] = n.JobID
		}
	}
	return out, nil
}

// writeWfScripts saves the plans and their members (chaos_wf, chaos_wf_member) on pool.
func writeWfScripts(ctx context.Context, pool *pgxpool.Pool, plans []*wfPlan) error {
	var wfs, members [][]any
	for _, pl := range plans {
		wfs = append(wfs, []any{uuidOf(pl.id), pl.seq, pl.batch, pl.plan, pl.open, pl.failFast})
		for _, m := range pl.members {
			members = append(members, []any{uuidOf(m.job), uuidOf(pl.id), m.node, m.script, m.root, m.spawns})
		}
	}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"chaos_wf"}, []string{"wf_id", "seq", "batch", "plan", "open", "fail_fast"},
		pgx.CopyFromRows(wfs)); err != nil {
		return err
	}
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"chaos_wf_member"}, []string{"job_id", "wf_id", "node", "script", "root", "spawns"},
		pgx.CopyFromRows(members))
	return err
}

// ---- the retention schema ----------------------------------------------------------------

// setupRetain (re)creates the retention schema: venturi's tables, the application's, and
// the archive of pruned workflows.
func (d *driver) setupRetain(ctx context.Context) error {
	s := d.retainSchema()
	if _, err := d.pool.Exec(ctx, fmt.Sprintf("DROP SCHEMA IF EXISTS %[1]s CASCADE; CREATE SCHEMA %[1]s", pgx.Identifier{s}.Sanitize())); err != nil {
		return err
	}
	dsn, err := withParams(d.o.dsn, "search_path", s, "application_name", "chaos-driver")
	if err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		pool.Close()
		return err
	}
	for _, sql := range []string{appSchema, wfSchema, archiveSchema} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			pool.Close()
			return err
		}
	}
	d.wf.rpool, d.wf.rschema = pool, s
	return nil
}

// retainBoundaries are the minute boundaries (UTC, where the history's partitions of a
// minute end) that the retention workflows straddle: every one from 12 s after now to 2 s
// after the end of the arrival window (the short profile's window always holds one), at
// most four; none when the window holds none (a short control run: the workflows then
// run at once, and their members are not pruned before they are read).
func retainBoundaries(now time.Time, arrival time.Duration) []time.Time {
	var out []time.Time
	for m := now.Add(12 * time.Second).Truncate(time.Minute); !m.After(now.Add(arrival+2*time.Second)) && len(out) < 4; m = m.Add(time.Minute) {
		if m.Before(now.Add(12 * time.Second)) {
			continue
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		out = append(out, time.Time{})
	}
	return out
}

// enqueueRetain writes the retention schema's workflows: per boundary, a few whose roots
// end a few seconds before it, and whose "late" node (a spawner of two) is due retainDelay
// after them, after their jobs' partition was dropped; half of them have a member that
// fails and its compensation (a failed workflow is kept as long as dead jobs), the others
// succeed and are pruned retainCompleted after they finish.
func (d *driver) enqueueRetain(ctx context.Context, seq *int64) error {
	q := venturi.NewQueue(d.wf.rpool, venturi.QueueConfig{})
	per := min(8, max(2, d.o.prof.jobs/500))
	for _, m := range retainBoundaries(time.Now(), d.o.prof.arrival) {
		due, delay := venturi.After(time.Second), time.Second
		if !m.IsZero() {
			due, delay = venturi.At(m.Add(-5*time.Second)), retainDelay
		}
		for i := range per {
			*seq++
			pl := &wfPlan{seq: *seq}
			wf := venturi.NewWorkflow(fmt.Sprintf("chaos retain %d", *seq))
			at := venturi.With(due)
			add := func(name string, t WfTask, root bool, opts ...venturi.NodeOption) venturi.Node {
				m := &wfMember{node: name, scenario: scWorkflow, script: t.Script, root: root, spawns: -1}
				if t.Spawner {
					m.spawns = len(t.Spawn)
				}
				pl.members = append(pl.members, m)
				return wf.Add(name, t, append(opts, at)...)
			}
			task := func(script string) WfTask { return WfTask{Seq: *seq, Script: script, WorkMs: 50 + d.rng.IntN(100)} }
			r0 := add("r0", task(wfOK), true)
			r1 := add("r1", task(wfOK), true)
			lt := task(wfOK)
			lt.Spawner, lt.Spawn = true, []WfChild{{Name: "c0", Script: wfOK}, {Name: "c1", Script: wfOK, Needs: "c0"}}
			late := add("late", lt, false, venturi.Needs(r0, r1), venturi.DelayAfterDeps(delay))
			add("ended", task(wfOK), false, venturi.NeedsEnded(r1, late))
			add("tail", task(wfOK), false, venturi.Needs(late))
			if i%2 == 1 {
				bad := add("bad", task(wfPermanent), false, venturi.Needs(r0))
				add("comp", task(wfOK), false, venturi.NeedsFailure(bad))
			}
			res, err := q.EnqueueWorkflow(ctx, wf)
			if err != nil {
				return fmt.Errorf("retention workflow: %w", err)
			}
			pl.id = res.ID
			for _, m := range pl.members {
				m.job = res.Jobs[m.node]
			}
			d.wf.retain = append(d.wf.retain, pl)
		}
	}
	return writeWfScripts(ctx, d.wf.rpool, d.wf.retain)
}

// retainDSN is a worker slot's connection URL to the retention schema, or "" for a slot
// without a retention worker: one behind PgBouncer (which sets the search_path itself).
func (d *driver) retainDSN(slot int) (string, error) {
	if d.wf.rpool == nil || d.behindPgBouncer(slot) {
		return "", nil
	}
	dsn, err := d.workerDSN(slot)
	if err != nil {
		return "", err
	}
	return withParams(dsn, "search_path", d.wf.rschema)
}

// ---- what the driver does while the workload runs ----------------------------------------

// runWfOps does the scripted operations on the workflows while the workload runs: cancels
// (CancelWorkflow, again after a transient error), adds to open batches (AddToBatchTx, in
// a transaction that also writes the new members' expectations), seals, and a retry of
// each workflow planned for one once it has failed (its record written first: the members
// scripted once read it). It returns when all are done, or when ctx ends.
func (d *driver) runWfOps(ctx context.Context) {
	q := venturi.NewQueue(d.pool, venturi.QueueConfig{})
	type action struct {
		at   time.Time
		do   func(context.Context) bool // true: done
		done bool
	}
	var acts []*action
	var retries []*wfPlan
	for _, pl := range d.wf.plans {
		// The plan's times count from when it is due (its wave after its enqueue), or from
		// when the workers started, when that is later.
		base := pl.at.Add(pl.due)
		if base.Before(d.started) {
			base = d.started
		}
		if pl.plan == "cancel" {
			acts = append(acts, &action{at: base.Add(pl.opAt), do: func(ctx context.Context) bool { return d.cancelWf(ctx, q, pl) }})
		}
		for _, a := range pl.adds {
			acts = append(acts, &action{at: base.Add(a.at), do: func(ctx context.Context) bool { return d.addToBatch(ctx, q, pl, a.n) }})
		}
		if pl.open {
			acts = append(acts, &action{at: base.Add(pl.sealAt), do: func(ctx context.Context) bool { return d.sealBatch(ctx, q, pl) }})
		}
		if pl.plan == "retry" {
			retries = append(retries, pl)
		}
	}
	retried := map[*wfPlan]int{} // 1: recorded, 2: done
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		pending := false
		for _, a := range acts {
			if a.done {
				continue
			}
			pending = true
			// An operation that fails is tried again, as an operator would, until it has
			// been failing for opPersist: a count of tries ran out while the database was
			// gone longer than 50 ticks (the full disk's 20 s), and an open batch whose seal
			// was given up stayed open at quiescence.
			if !time.Now().Before(a.at) {
				a.done = a.do(ctx) || time.Since(a.at) > opPersist
			}
		}
		for _, pl := range retries {
			if retried[pl] == 2 {
				continue
			}
			pending = true
			retried[pl] = d.retryWf(ctx, q, pl, retried[pl])
		}
		if !pending {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// cancelWf cancels pl's workflow; it reports whether it is done (a transient error asks
// for another try).
func (d *driver) cancelWf(ctx context.Context, q *venturi.Queue, pl *wfPlan) bool {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	at := time.Now()
	err := q.CancelWorkflow(cctx, pl.id, "chaos: scripted cancel")
	rec := wfOpRecord{wf: pl.id, op: "cancel", at: at, done: time.Now()}
	if err != nil {
		rec.err = err.Error()
	}
	d.wf.record(rec)
	return err == nil || errors.Is(err, venturi.ErrWorkflowFinished)
}

// addToBatch adds n members to pl's open batch, with their expectations and scripts in the
// same transaction: they exist, and are expected, or neither.
func (d *driver) addToBatch(ctx context.Context, q *venturi.Queue, pl *wfPlan, n int) bool {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	at := time.Now()
	var ids []ulid.ULID
	err := pgx.BeginTxFunc(cctx, d.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		tasks := make([]venturi.Task, n)
		for i := range tasks {
			tasks[i] = WfTask{Seq: pl.seq, Script: wfOK, WorkMs: pl.workMs}
		}
		var err error
		if ids, err = q.AddToBatchTx(cctx, tx, pl.id, tasks...); err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := tx.Exec(cctx, `INSERT INTO chaos_expect (job_id, seq, scenario, want_state, grp) VALUES ($1, $2, $3, $4, $5)`,
				uuidOf(id), pl.seq, scBatch, "completed|dead|cancelled", pl.id.String()); err != nil {
				return err
			}
			if _, err := tx.Exec(cctx, `INSERT INTO chaos_wf_member (job_id, wf_id, node, script, root) VALUES ($1, $2, $3, $4, false)`,
				uuidOf(id), uuidOf(pl.id), id.String(), wfOK); err != nil {
				return err
			}
		}
		return nil
	})
	rec := wfOpRecord{wf: pl.id, op: "add", at: at, done: time.Now(), n: len(ids)}
	if err != nil {
		rec.err, rec.n = err.Error(), 0
	}
	d.wf.record(rec)
	return true // an add that failed is not tried again: the batch is sealed without it
}

// opPersist is how long the driver keeps trying a scripted operation that fails: longer
// than any fault keeps the database away.
const opPersist = 2 * time.Minute

// sealBatch seals pl's open batch; it reports whether it is done.
func (d *driver) sealBatch(ctx context.Context, q *venturi.Queue, pl *wfPlan) bool {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	at := time.Now()
	err := q.SealBatch(cctx, pl.id)
	rec := wfOpRecord{wf: pl.id, op: "seal", at: at, done: time.Now()}
	if err != nil {
		rec.err = err.Error()
	}
	d.wf.record(rec)
	return err == nil || errors.Is(err, venturi.ErrWorkflowFinished)
}

// retryWf retries pl's workflow once it has failed: step 0, nothing done yet; 1, the
// retry recorded (chaos_wf_op 'retry'); 2, done (retried, or the workflow finished
// otherwise). It returns the step reached.
func (d *driver) retryWf(ctx context.Context, q *venturi.Queue, pl *wfPlan, step int) int {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var state string
	if err := d.pool.QueryRow(cctx, `SELECT state FROM venturi_workflow WHERE id = $1`, uuidOf(pl.id)).Scan(&state); err != nil {
		return step
	}
	switch {
	case state == "open":
		return step
	case state != "failed":
		return 2
	}
	if step == 0 {
		if _, err := d.pool.Exec(cctx, `INSERT INTO chaos_wf_op (wf_id, op, at) VALUES ($1, 'retry', clock_timestamp())`, uuidOf(pl.id)); err != nil {
			return 0
		}
		step = 1
	}
	at := time.Now()
	n, err := q.RetryWorkflow(cctx, pl.id, "chaos: scripted retry")
	rec := wfOpRecord{wf: pl.id, op: "retried", at: at, done: time.Now(), n: n}
	if err != nil {
		rec.err = err.Error()
	}
	d.wf.record(rec)
	if err != nil {
		return 1
	}
	return 2
}

// saveWfOps writes the operations done to chaos_wf_op (the database may still be coming
// back from the last restart).
func (d *driver) saveWfOps(ctx context.Context) error {
	d.wf.mu.Lock()
	ops := slices.Clone(d.wf.ops)
	d.wf.mu.Unlock()
	var rows [][]any
	for _, o := range ops {
		rows = append(rows, []any{uuidOf(o.wf), o.op, o.at, o.done, o.err, o.n})
	}
	var err error
	for range 20 {
		_, err = d.pool.CopyFrom(ctx, pgx.Identifier{"chaos_wf_op"}, []string{"wf_id", "op", "at", "done", "err", "n"}, pgx.CopyFromRows(rows))
		if err == nil {
			return nil
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	return err
}

// ---- deadlocks ---------------------------------------------------------------------------

// sampleDeadlocks adds up pg_stat_database.deadlocks of the run's database every second
// until ctx ends. PostgreSQL forgets its statistics in a crash (an immediate restart): a
// count that went down counts again from zero.
func (d *driver) sampleDeadlocks(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		d.sampleDeadlocksOnce(ctx)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

func (d *driver) sampleDeadlocksOnce(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var n int64
	if err := d.pool.QueryRow(qctx, `SELECT COALESCE(deadlocks, 0) FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		return
	}
	d.wf.dlMu.Lock()
	defer d.wf.dlMu.Unlock()
	switch {
	case !d.wf.dlSampled:
		d.wf.dlSampled = true
	case n >= d.wf.dlLast:
		d.wf.deadlocks += n - d.wf.dlLast
	default: // reset by a crash
		d.wf.deadlocks += n
	}
	d.wf.dlLast = n
}

// deadlockCount is the deadlocks counted over the run, nil when never sampled.
func (d *driver) deadlockCount() *int64 {
	d.wf.dlMu.Lock()
	defer d.wf.dlMu.Unlock()
	if !d.wf.dlSampled {
		return nil
	}
	n := d.wf.deadlocks
	return &n
}

// wfPending counts what keeps the workflows from quiescence in the schema pool reads:
// open workflows and unsettled inbox rows.
func wfPending(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM venturi_workflow WHERE state = 'open')
		+ (SELECT count(*) FROM venturi_workflow_inbox)
		+ (SELECT count(*) FROM venturi_job WHERE workflow_id IS NOT NULL AND state NOT IN ('completed', 'dead', 'cancelled'))`).Scan(&n)
	return n, err
}
