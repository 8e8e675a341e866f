package venturi_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// wfLog is the worker state of the workflow tests: the order handlers started in, and
// the nodes that fail (permanently) until told otherwise.
type wfLog struct {
	mu      sync.Mutex
	started []string
	fail    map[string]bool
}

func (l *wfLog) order() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.started)
}

func (l *wfLog) setFail(node string, fail bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail[node] = fail
}

type wfStep struct {
	Node string `json:"node"`
}

func (wfStep) Kind() string { return "wf-step" }

func (s wfStep) Handle(_ context.Context, _ *venturi.Run[struct{}], l *wfLog) (venturi.Outcome, error) {
	l.mu.Lock()
	l.started = append(l.started, s.Node)
	fail := l.fail[s.Node]
	l.mu.Unlock()
	if fail {
		return venturi.Outcome{}, venturi.Permanent(errors.New(s.Node + " fails"))
	}
	return venturi.Completed(), nil
}

func waitWorkflow(t *testing.T, q *venturi.Queue, id ulid.ULID, want venturi.WorkflowState) *venturi.WorkflowInfo {
	t.Helper()
	var info *venturi.WorkflowInfo
	eventually(t, within, "workflow "+string(want), func() bool {
		var err error
		info, err = q.Workflow(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return info.State == want
	})
	return info
}

func nodesOf(t *testing.T, q *venturi.Queue, id ulid.ULID) map[string]venturi.NodeInfo {
	t.Helper()
	ns, err := q.WorkflowNodes(context.Background(), id, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]venturi.NodeInfo{}
	for _, n := range ns {
		out[n.Name] = n
	}
	return out
}

// A diamond with a failing branch: what needs the failure is decided without a run, the
// compensation and the node that needs everything ended run, and the workflow fails; a
// retry of the failed node revives what was decided because of it.
func TestWorkflowPoliciesAndRetry(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	log := &wfLog{fail: map[string]bool{"b": true}}
	startWorkerFor[wfStep](t, pool, log, fastConfig())

	wf := venturi.NewWorkflow("diamond")
	a := wf.Add("a", wfStep{Node: "a"})
	b := wf.Add("b", wfStep{Node: "b"}, venturi.Needs(a))
	c := wf.Add("c", wfStep{Node: "c"}, venturi.Needs(a))
	wf.Add("d", wfStep{Node: "d"}, venturi.Needs(b, c))
	wf.Add("undo", wfStep{Node: "undo"}, venturi.NeedsFailure(b))
	wf.Add("report", wfStep{Node: "report"}, venturi.NeedsEnded(b, c))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != venturi.ActionInserted || len(res.Jobs) != 6 {
		t.Fatalf("result %+v", res)
	}
	waitWorkflow(t, q, res.ID, venturi.WorkflowFailed)
	nodes := nodesOf(t, q, res.ID)
	if n := nodes["d"]; n.Own != "dfail" || n.JobState != venturi.StateCancelled {
		t.Fatalf("d: %+v", n)
	}
	d := jobByID(t, q, res.Jobs["d"])
	if e := lastEntry(d); e.Event != "upstream_failed" {
		t.Fatalf("d's journal %+v", d.Journal)
	}
	order := log.order()
	if slices.Contains(order, "d") || order[0] != "a" || !slices.Contains(order, "undo") || !slices.Contains(order, "report") {
		t.Fatalf("order %v", order)
	}
	for _, n := range []string{"undo", "report"} {
		if slices.Index(order, n) < slices.Index(order, "b") {
			t.Fatalf("%s started before b ended: %v", n, order)
		}
	}

	// Retry b, which now succeeds: d is revived and runs; the workflow succeeds.
	log.setFail("b", false)
	br, err := q.RetryJobs(ctx, venturi.JobFilter{IDs: []ulid.ULID{res.Jobs["b"]}}, venturi.BulkOptions{Reason: "fixed"})
	if err != nil || br.Changed != 1 {
		t.Fatalf("retry: %+v %v", br, err)
	}
	waitWorkflow(t, q, res.ID, venturi.WorkflowSucceeded)
	if n := nodesOf(t, q, res.ID)["d"]; n.Own != "ok" || n.JobState != venturi.StateCompleted {
		t.Fatalf("d after the retry: %+v", n)
	}
	got := log.order()
	lastB := -1
	for i, n := range got {
		if n == "b" {
			lastB = i
		}
	}
	if slices.Index(got, "d") < lastB {
		t.Fatalf("d ran before b's retry ended: %v", got)
	}
}

// A group is a barrier: what needs it runs once it is sealed and its members ended; an
// empty sealed group is satisfied at once.
func TestWorkflowGroups(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	log := &wfLog{fail: map[string]bool{}}
	startWorkerFor[wfStep](t, pool, log, fastConfig())

	wf := venturi.NewWorkflow("groups")
	rows := wf.Group("rows", venturi.OpenGroup())
	for _, n := range []string{"r1", "r2", "r3"} {
		wf.Add(n, wfStep{Node: n}, venturi.In(rows))
	}
	wf.Add("total", wfStep{Node: "total"}, venturi.Needs(rows))
	empty := wf.Group("empty")
	wf.Add("after-empty", wfStep{Node: "after-empty"}, venturi.Needs(empty))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, q, res.Jobs["after-empty"], "after-empty completed", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
	for _, n := range []string{"r1", "r2", "r3"} {
		waitJob(t, q, res.Jobs[n], n+" completed", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
	}
	if j := jobByID(t, q, res.Jobs["total"]); j.State != venturi.StateBlocked {
		t.Fatalf("total is %s before the group is sealed", j.State)
	}
	if err := q.SealGroup(ctx, res.ID, "rows"); err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, res.ID, venturi.WorkflowSucceeded)
	if err := q.SealGroup(ctx, res.ID, "rows"); !errors.Is(err, venturi.ErrWorkflowFinished) {
		t.Fatalf("sealing twice: %v", err)
	}
}

// Cancelling a workflow ends its blocked nodes at once and its released jobs as Cancel
// does; nothing is left waiting.
func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	wf := venturi.NewWorkflow("cancel me")
	a := wf.Add("a", wfStep{Node: "a"})
	wf.Add("b", wfStep{Node: "b"}, venturi.Needs(a))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	// No worker: a is available, b blocked.
	if j := jobByID(t, q, res.Jobs["b"]); j.State != venturi.StateBlocked {
		t.Fatalf("b is %s", j.State)
	}
	if err := q.CancelWorkflow(ctx, res.ID, "not needed"); err != nil {
		t.Fatal(err)
	}
	requireAudit(t, q, venturi.AuditWorkflowCancel, res.ID.String(), 1) // a; b was blocked
	log := &wfLog{fail: map[string]bool{}}
	startWorkerFor[wfStep](t, pool, log, fastConfig())
	info := waitWorkflow(t, q, res.ID, venturi.WorkflowCancelled)
	if info.CancelNote != "not needed" {
		t.Fatalf("info %+v", info)
	}
	for _, n := range []string{"a", "b"} {
		if j := jobByID(t, q, res.Jobs[n]); j.State != venturi.StateCancelled {
			t.Fatalf("%s is %s", n, j.State)
		}
	}
	// A job enqueued after proves the worker runs; it is the only one that ran.
	r := enqueue(t, q, wfStep{Node: "probe"})
	waitState(t, q, r, venturi.StateCompleted)
	if got := log.order(); !slices.Equal(got, []string{"probe"}) {
		t.Fatalf("ran %v after the cancel", got)
	}
	if err := q.CancelWorkflow(ctx, res.ID, "again"); !errors.Is(err, venturi.ErrWorkflowFinished) {
		t.Fatalf("cancelling twice: %v", err)
	}
}

// The graph is checked before anything is written.
func TestWorkflowInvalid(t *testing.T) {
	t.Parallel()
	_, q := newQueue(t)
	ctx := context.Background()
	cases := map[string]func(*venturi.Workflow){
		"empty":        func(*venturi.Workflow) {},
		"twice":        func(w *venturi.Workflow) { w.Add("a", wfStep{}); w.Add("a", wfStep{}) },
		"unknown need": func(w *venturi.Workflow) { w.Add("a", wfStep{}, venturi.Needs(venturi.Node{})) },
		"mixed": func(w *venturi.Workflow) {
			a := w.Add("a", wfStep{})
			w.Add("b", wfStep{}, venturi.Needs(a), venturi.NeedsEnded(a))
		},
		"cycle through a group": func(w *venturi.Workflow) {
			g := w.Group("g")
			w.Add("a", wfStep{}, venturi.In(g), venturi.Needs(g))
		},
		"in a job": func(w *venturi.Workflow) {
			a := w.Add("a", wfStep{})
			w.Add("b", wfStep{}, venturi.In(a))
		},
		"compensation of nothing": func(w *venturi.Workflow) { w.Add("a", wfStep{}, venturi.NeedsFailure()) },
	}
	for name, build := range cases {
		wf := venturi.NewWorkflow(name)
		build(wf)
		if _, err := q.EnqueueWorkflow(ctx, wf); !errors.Is(err, venturi.ErrWorkflowInvalid) {
			t.Errorf("%s: %v, want ErrWorkflowInvalid", name, err)
		}
	}
}

// A workflow key makes the enqueue idempotent while the workflow is open.
func TestWorkflowKey(t *testing.T) {
	t.Parallel()
	_, q := newQueue(t)
	ctx := context.Background()
	build := func() *venturi.Workflow {
		wf := venturi.NewWorkflow("import", venturi.WorkflowKey("import/42"))
		wf.Add("a", wfStep{Node: "a"})
		return wf
	}
	first, err := q.EnqueueWorkflow(ctx, build())
	if err != nil {
		t.Fatal(err)
	}
	again, err := q.EnqueueWorkflow(ctx, build())
	if err != nil || again.Action != venturi.ActionKept || again.ID != first.ID {
		t.Fatalf("again: %+v %v (first %s)", again, err, first.ID)
	}
}

// A member kept for no time (Discard) still releases what needs it: its finish records
// its end for the workflow itself (there is no history row to read it from). A delay
// after what a node needs makes it due that long after its release.
func TestWorkflowDiscardAndDelay(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	log := &wfLog{fail: map[string]bool{}}
	cfg := fastConfig()
	cfg.RetainCompleted = venturi.Discard
	startWorkerFor[wfStep](t, pool, log, cfg)

	wf := venturi.NewWorkflow("discarded")
	a := wf.Add("a", wfStep{Node: "a"})
	wf.Add("b", wfStep{Node: "b"}, venturi.Needs(a), venturi.DelayAfterDeps(300*time.Millisecond))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	var released time.Time
	eventually(t, within, "b released", func() bool {
		j, err := q.Job(ctx, res.Jobs["b"])
		if err != nil {
			t.Fatal(err)
		}
		if j.State == venturi.StateScheduled || j.State == venturi.StateAvailable {
			released = j.RunAt
			return true
		}
		return false
	})
	waitWorkflow(t, q, res.ID, venturi.WorkflowSucceeded)
	if _, err := q.Job(ctx, res.Jobs["a"]); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("a was kept: %v", err)
	}
	nodes := nodesOf(t, q, res.ID)
	if nodes["a"].Own != "ok" || nodes["b"].Own != "ok" {
		t.Fatalf("nodes %+v", nodes)
	}
	// b was due 300 ms after its release, by the database's clock.
	var ended time.Time
	if err := pool.QueryRow(ctx, `SELECT ended_at FROM venturi_workflow_node WHERE workflow_id = $1 AND node = 'a'`,
		res.ID[:]).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if d := released.Sub(ended); d < 300*time.Millisecond {
		t.Fatalf("b due %v after a ended, want at least 300ms", d)
	}
}

// TestRetryWorkflowRevivesInOrder: a fail-fast workflow a → b (Needs a) → c (NeedsEnded b):
// a fails, so b is decided (upstream failed) and c cancelled by fail-fast. A retry revives
// b, to wait for a, and c, which needs b's end: c waits for b, though both are revived by
// one settle (the chaos suite found c released there, from b's end before its revival);
// then all three run, in order. (retryRevivesInOrder, on the current schema.)
func TestRetryWorkflowRevivesInOrder(t *testing.T) {
	t.Parallel()
	retryRevivesInOrder(t, math.MaxInt, math.MaxInt)
}
