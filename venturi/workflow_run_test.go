package venturi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// flowLog is the worker state of the tests of outputs and spawns: what ran, in order,
// and how many times the spawner failed before it spawns and completes.
type flowLog struct {
	mu        sync.Mutex
	started   []string
	failFirst int // the spawner's runs that fail after spawning, before one completes
	total     int // what the fan-in read
	seen      []string
}

func (l *flowLog) note(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started = append(l.started, s)
	return len(l.started)
}

func (l *flowLog) order() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.started)
}

// pageTask outputs its number times ten.
type pageTask struct {
	N int `json:"n"`
}

func (pageTask) Kind() string { return "wf-page" }

func (p pageTask) Handle(_ context.Context, r *venturi.Run[struct{}], l *flowLog) (venturi.Outcome, error) {
	l.note(fmt.Sprintf("page-%d", p.N))
	if err := r.SetOutput(map[string]int{"value": p.N * 10}); err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.Completed(), nil
}

// splitTask spawns Pages pages at run time.
type splitTask struct {
	Pages int `json:"pages"`
}

func (splitTask) Kind() string { return "wf-split" }

func (s splitTask) Handle(ctx context.Context, r *venturi.Run[struct{}], l *flowLog) (venturi.Outcome, error) {
	l.note("split")
	w := venturi.NewWorkflow("")
	for i := range s.Pages {
		w.Add(fmt.Sprintf("page-%d", i), pageTask{N: i})
	}
	if _, err := r.Spawn(ctx, w); err != nil {
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	l.mu.Lock()
	fail := l.failFirst > 0
	l.failFirst--
	l.mu.Unlock()
	if fail {
		return venturi.Outcome{}, errors.New("split fails after spawning") // retried: spawns nothing
	}
	return venturi.Completed(), nil
}

// sumTask reads every output upstream of it and outputs their sum.
type sumTask struct{}

func (sumTask) Kind() string { return "wf-sum" }

func (sumTask) Handle(ctx context.Context, r *venturi.Run[struct{}], l *flowLog) (venturi.Outcome, error) {
	l.note("sum")
	outs, err := r.UpstreamOutputs(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	total := 0
	var seen []string
	for node, b := range outs {
		var v struct {
			Value int `json:"value"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return venturi.Outcome{}, venturi.Permanent(err)
		}
		total += v.Value
		seen = append(seen, node)
	}
	slices.Sort(seen)
	l.mu.Lock()
	l.total, l.seen = total, seen
	l.mu.Unlock()
	if err := r.SetOutput(total); err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.Completed(), nil
}

// A node spawns pages at run time; the node that needs it runs after every page, reads
// their outputs, and its own output is read from outside. The spawner's first run fails
// after calling Spawn: its spawns are not written, and the retry spawns once.
func TestWorkflowSpawnAndOutputs(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	l := &flowLog{failFirst: 1}
	w := newWorker(t, pool, l, fastConfig())
	venturi.MustRegister[splitTask](w)
	venturi.MustRegister[pageTask](w)
	venturi.MustRegister[sumTask](w)
	startWorker(t, w)

	const pages = 5
	wf := venturi.NewWorkflow("fan")
	split := wf.Add("split", splitTask{Pages: pages}, venturi.With(venturi.WithMeta(venturi.Meta{"tenant": "t1"})))
	wf.Add("sum", sumTask{}, venturi.Needs(split))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	info, err := q.AwaitWorkflow(actx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != venturi.WorkflowSucceeded || info.Nodes != 2+pages {
		t.Fatalf("workflow %+v", info)
	}
	order := l.order()
	if order[0] != "split" || order[1] != "split" || order[len(order)-1] != "sum" || len(order) != 3+pages {
		t.Fatalf("order %v (the pages run once, after the second split, before sum)", order)
	}
	want := 0
	var wantSeen []string
	for i := range pages {
		want += i * 10
		wantSeen = append(wantSeen, fmt.Sprintf("split/page-%d", i))
	}
	if l.total != want || !slices.Equal(l.seen, wantSeen) {
		t.Fatalf("sum read %d from %v, want %d from %v", l.total, l.seen, want, wantSeen)
	}
	var total int
	if err := q.WorkflowOutput(ctx, res.ID, "sum", &total); err != nil || total != want {
		t.Fatalf("sum's output %d, %v", total, err)
	}
	if err := q.WorkflowOutput(ctx, res.ID, "split", &total); !errors.Is(err, venturi.ErrNoOutput) {
		t.Fatalf("split's output: %v, want ErrNoOutput", err)
	}
	nodes := nodesOf(t, q, res.ID)
	if n := nodes["split/page-0"]; n.In != "split" || n.Own != "ok" {
		t.Fatalf("a spawned node %+v", n)
	}
	// Every job carries its workflow and node; a spawned one inherits its spawner's keys.
	page := jobByID(t, q, nodes["split/page-0"].JobID)
	if m := page.Meta; m[venturi.MetaWorkflow] != res.ID.String() || m[venturi.MetaNode] != "split/page-0" || m["tenant"] != "t1" {
		t.Fatalf("a spawned job's metadata %v", m)
	}
	if m := jobByID(t, q, res.Jobs["sum"]).Meta; m[venturi.MetaNode] != "sum" || m["tenant"] != "" {
		t.Fatalf("sum's metadata %v", m)
	}
}

// outsideTask records what the workflow calls say to a job outside workflows.
type outsideTask struct{}

func (outsideTask) Kind() string { return "wf-outside" }

func (outsideTask) Handle(ctx context.Context, r *venturi.Run[struct{}], l *flowLog) (venturi.Outcome, error) {
	if err := r.SetOutput("kept nowhere"); err != nil {
		return venturi.Outcome{}, err
	}
	_, _, err := r.Workflow(ctx)
	_, err2 := r.UpstreamOutputs(ctx)
	_, err3 := r.Spawn(ctx, venturi.NewWorkflow(""))
	for _, e := range []error{err, err2} {
		if !errors.Is(e, venturi.ErrNotInWorkflow) {
			return venturi.Outcome{}, venturi.Permanent(fmt.Errorf("want ErrNotInWorkflow, got %v", e))
		}
	}
	if err3 == nil {
		return venturi.Outcome{}, venturi.Permanent(errors.New("Spawn outside workflows succeeded"))
	}
	return venturi.Completed(), nil
}

// A run outside workflows: its output is not stored (its job completes), and the
// workflow calls say why they cannot serve it.
func TestOutputOutsideWorkflows(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	startWorkerFor[outsideTask](t, pool, &flowLog{}, fastConfig())
	r, err := q.Enqueue(ctx, outsideTask{})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	j, err := q.Await(actx, r.ID)
	if err != nil || j.State != venturi.StateCompleted {
		t.Fatalf("job %+v %v", j, err)
	}
}

// Nodes added to a running workflow: they need its nodes and join its open group, what
// needs the group waits for them; the graph is checked against the workflow's.
func TestAddToWorkflow(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	log := &wfLog{fail: map[string]bool{}}
	startWorkerFor[wfStep](t, pool, log, fastConfig())

	wf := venturi.NewWorkflow("open")
	wf.Add("a", wfStep{Node: "a"})
	g := wf.Group("members", venturi.OpenGroup())
	wf.Add("after", wfStep{Node: "after"}, venturi.Needs(g))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	add := venturi.NewWorkflow("")
	m1 := add.Add("m1", wfStep{Node: "m1"}, venturi.In(venturi.NodeNamed("members")), venturi.Needs(venturi.NodeNamed("a")))
	add.Add("m2", wfStep{Node: "m2"}, venturi.In(venturi.NodeNamed("members")), venturi.Needs(m1))
	ids, err := q.AddToWorkflow(ctx, res.ID, add)
	if err != nil || len(ids) != 2 {
		t.Fatalf("add: %v %v", ids, err)
	}
	for name, bad := range map[string]*venturi.Workflow{
		"a name it has": func() *venturi.Workflow {
			w := venturi.NewWorkflow("")
			w.Add("a", wfStep{Node: "a"})
			return w
		}(),
		"an unknown node": func() *venturi.Workflow {
			w := venturi.NewWorkflow("")
			w.Add("x", wfStep{Node: "x"}, venturi.Needs(venturi.NodeNamed("nope")))
			return w
		}(),
		"a cycle through the group": func() *venturi.Workflow {
			w := venturi.NewWorkflow("")
			w.Add("x", wfStep{Node: "x"}, venturi.In(venturi.NodeNamed("members")), venturi.Needs(venturi.NodeNamed("after")))
			return w
		}(),
		"a job for a group": func() *venturi.Workflow {
			w := venturi.NewWorkflow("")
			w.Add("x", wfStep{Node: "x"}, venturi.In(venturi.NodeNamed("a")))
			return w
		}(),
	} {
		if _, err := q.AddToWorkflow(ctx, res.ID, bad); !errors.Is(err, venturi.ErrWorkflowInvalid) {
			t.Fatalf("%s: %v, want ErrWorkflowInvalid", name, err)
		}
	}
	eventually(t, within, "m2 to run", func() bool { return slices.Contains(log.order(), "m2") })
	if slices.Contains(log.order(), "after") {
		t.Fatalf("after ran while the group was open: %v", log.order())
	}
	if err := q.SealGroup(ctx, res.ID, "members"); err != nil {
		t.Fatal(err)
	}
	requireAudit(t, q, venturi.AuditWorkflowSeal, res.ID.String()+"/members", 1)
	waitWorkflow(t, q, res.ID, venturi.WorkflowSucceeded)
	order := log.order()
	if !slices.Equal(order, []string{"a", "m1", "m2", "after"}) {
		t.Fatalf("order %v", order)
	}
	if _, err := q.AddToWorkflow(ctx, res.ID, add); !errors.Is(err, venturi.ErrWorkflowFinished) {
		t.Fatalf("add to a finished workflow: %v", err)
	}
}

// A failed workflow retried: what failed runs again, what it decided is decided again,
// what completed does not run again; fail-fast's cancel is lifted.
func TestRetryWorkflow(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	log := &wfLog{fail: map[string]bool{"b": true}}
	startWorkerFor[wfStep](t, pool, log, fastConfig())

	wf := venturi.NewWorkflow("retry", venturi.FailFast())
	a := wf.Add("a", wfStep{Node: "a"})
	b := wf.Add("b", wfStep{Node: "b"}, venturi.Needs(a))
	c := wf.Add("c", wfStep{Node: "c"}, venturi.Needs(a), venturi.DelayAfterDeps(time.Hour))
	wf.Add("d", wfStep{Node: "d"}, venturi.Needs(b, c))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, res.ID, venturi.WorkflowFailed)
	if n := nodesOf(t, q, res.ID); n["c"].JobState != venturi.StateCancelled || n["d"].JobState != venturi.StateCancelled {
		t.Fatalf("fail-fast left %+v", n)
	}
	log.setFail("b", false)
	n, err := q.RetryWorkflow(ctx, res.ID, "fixed")
	if err != nil || n != 2 { // b failed, c was cancelled by the fail-fast
		t.Fatalf("retry: %d, %v", n, err)
	}
	info, err := q.Workflow(ctx, res.ID)
	if err != nil || info.State != venturi.WorkflowOpen || info.Attempt != 2 {
		t.Fatalf("after the retry %+v %v", info, err)
	}
	requireAudit(t, q, venturi.AuditWorkflowRetry, res.ID.String(), 2)
	eventually(t, within, "b to run again", func() bool { return len(log.order()) == 3 })
	// c waits for its delay; d for c.
	nodes := nodesOf(t, q, res.ID)
	if nodes["c"].JobState != venturi.StateScheduled || nodes["d"].JobState != venturi.StateBlocked {
		t.Fatalf("after the retry: c %+v, d %+v", nodes["c"], nodes["d"])
	}
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET run_at = now() WHERE id = $1`, pgtype.UUID{Bytes: res.Jobs["c"], Valid: true}); err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, res.ID, venturi.WorkflowSucceeded)
	if order := log.order(); !slices.Equal(order, []string{"a", "b", "b", "c", "d"}) {
		t.Fatalf("order %v", order)
	}
	if n, err := q.RetryWorkflow(ctx, res.ID, ""); err != nil || n != 0 {
		t.Fatalf("retry of a succeeded workflow: %d, %v", n, err)
	}
}

// A finished workflow past its retention is pruned with its nodes and outputs; an open
// one is not.
func TestPruneWorkflows(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	log := &wfLog{fail: map[string]bool{}}
	startWorkerFor[wfStep](t, pool, log, fastConfig())
	done := venturi.NewWorkflow("done")
	done.Add("a", wfStep{Node: "a"})
	r1, err := q.EnqueueWorkflow(ctx, done)
	if err != nil {
		t.Fatal(err)
	}
	open := venturi.NewWorkflow("open")
	open.Group("g", venturi.OpenGroup())
	r2, err := q.EnqueueWorkflow(ctx, open)
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, r1.ID, venturi.WorkflowSucceeded)
	if _, err := pool.Exec(ctx, `UPDATE venturi_workflow SET finished_at = now() - interval '2 hours' WHERE id = $1`, pgtype.UUID{Bytes: r1.ID, Valid: true}); err != nil {
		t.Fatal(err)
	}
	eventually(t, within, "the finished workflow pruned", func() bool {
		_, err := q.Workflow(ctx, r1.ID)
		return errors.Is(err, venturi.ErrWorkflowNotFound)
	})
	var nodes int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_workflow_node WHERE workflow_id = $1`, pgtype.UUID{Bytes: r1.ID, Valid: true}).Scan(&nodes); err != nil || nodes != 0 {
		t.Fatalf("nodes left: %d %v", nodes, err)
	}
	if _, err := q.Workflow(ctx, r2.ID); err != nil {
		t.Fatalf("the open workflow: %v", err)
	}
}

// requireAudit fails unless the newest audit entries hold one of action on target that
// counts count.
func requireAudit(t *testing.T, q *venturi.Queue, action, target string, count int) {
	t.Helper()
	entries, err := q.AuditLog(context.Background(), 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Action == action && e.Target == target && e.Count == count {
			return
		}
	}
	t.Fatalf("no audit entry %s %s counting %d in %+v", action, target, count, entries)
}

// Behind a pooler in transaction mode pgx sends statements without preparing them
// (QueryExecModeExec): every write of a workflow's nodes works there too (they went as
// bytea and the server refused them as JSON).
func TestWorkflowsWithoutPreparedStatements(t *testing.T) {
	t.Parallel()
	migrated, _ := newQueue(t)
	cfg := migrated.Config().Copy()
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := context.Background()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	l := &flowLog{}
	w := newWorker(t, pool, l, fastConfig())
	venturi.MustRegister[splitTask](w)
	venturi.MustRegister[pageTask](w)
	venturi.MustRegister[sumTask](w)
	startWorker(t, w)
	wf := venturi.NewWorkflow("exec mode")
	split := wf.Add("split", splitTask{Pages: 2})
	wf.Add("sum", sumTask{}, venturi.Needs(split), venturi.In(wf.Group("g", venturi.OpenGroup())))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	add := venturi.NewWorkflow("")
	add.Add("extra", pageTask{N: 7}, venturi.In(venturi.NodeNamed("g")))
	if _, err := q.AddToWorkflow(ctx, res.ID, add); err != nil {
		t.Fatal(err)
	}
	if err := q.SealGroup(ctx, res.ID, "g"); err != nil {
		t.Fatal(err)
	}
	b, err := q.EnqueueBatch(ctx, venturi.NewBatch("exec mode"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []ulid.ULID{res.ID, b.ID} {
		actx, cancel := context.WithTimeout(ctx, within)
		info, err := q.AwaitWorkflow(actx, id)
		cancel()
		if err != nil || info.State != venturi.WorkflowSucceeded {
			t.Fatalf("workflow %s: %+v, %v", id, info, err)
		}
	}
	if info, _ := q.Workflow(ctx, res.ID); info.Nodes != 6 { // split, sum, g, extra, 2 pages
		t.Fatalf("nodes %d", info.Nodes)
	}
}
