package venturi_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// batchState is the worker state of the batch tests: the queue (members add members),
// the callbacks' runs and what they saw.
type batchState struct {
	q      *venturi.Queue
	mu     sync.Mutex
	calls  []string
	counts map[string]venturi.BatchInfo
	sums   map[string]int
}

func (s *batchState) record(name string, info *venturi.BatchInfo, sum int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, name)
	s.counts[name] = *info
	s.sums[name] = sum
}

func (s *batchState) snapshot() ([]string, map[string]venturi.BatchInfo, map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls), maps.Clone(s.counts), maps.Clone(s.sums)
}

// memberTask outputs N; N < 0 fails permanently; Spawn > 0 adds that many members to
// its batch from the handler, in the run's own transaction.
type memberTask struct {
	N     int `json:"n"`
	Spawn int `json:"spawn,omitempty"`
}

func (memberTask) Kind() string { return "batch-member" }

func (m memberTask) Handle(ctx context.Context, r *venturi.Run[struct{}], s *batchState) (venturi.Outcome, error) {
	if m.N < 0 {
		return venturi.Outcome{}, venturi.Permanent(errors.New("member fails"))
	}
	if err := r.SetOutput(m.N); err != nil {
		return venturi.Outcome{}, err
	}
	if m.Spawn > 0 {
		id, _, err := r.Workflow(ctx)
		if err != nil {
			return venturi.Outcome{}, err
		}
		var more []venturi.Task
		for i := range m.Spawn {
			more = append(more, memberTask{N: 100 + i})
		}
		if _, err := s.q.AddToBatch(ctx, id, more...); err != nil {
			return venturi.Outcome{}, venturi.Permanent(err)
		}
	}
	return venturi.Completed(), nil
}

// callbackTask records the counts and the sum of the members' outputs it sees.
type callbackTask struct {
	Name string `json:"name"`
}

func (callbackTask) Kind() string { return "batch-callback" }

func (c callbackTask) Handle(ctx context.Context, r *venturi.Run[struct{}], s *batchState) (venturi.Outcome, error) {
	info, err := r.Batch(ctx)
	if err != nil {
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	outs, err := r.UpstreamOutputs(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	sum := 0
	for _, b := range outs {
		var n int
		if err := json.Unmarshal(b, &n); err != nil {
			return venturi.Outcome{}, venturi.Permanent(err)
		}
		sum += n
	}
	s.record(c.Name, info, sum)
	return venturi.Completed(), nil
}

func startBatchWorker(t *testing.T) (*venturi.Queue, *batchState) {
	t.Helper()
	pool, q := newQueue(t)
	s := &batchState{q: q, counts: map[string]venturi.BatchInfo{}, sums: map[string]int{}}
	w := newWorker(t, pool, s, fastConfig())
	venturi.MustRegister[memberTask](w)
	venturi.MustRegister[callbackTask](w)
	startWorker(t, w)
	return q, s
}

// A sealed batch with a failing member: OnFailure runs once, OnEnd once after every
// member ended, with exact counts and the members' outputs; OnSuccess ends without a run.
func TestBatchCallbacks(t *testing.T) {
	t.Parallel()
	q, s := startBatchWorker(t)
	ctx := context.Background()
	b := venturi.NewBatch("five",
		venturi.OnSuccess(callbackTask{Name: "success"}),
		venturi.OnEnd(callbackTask{Name: "end"}),
		venturi.OnFailure(callbackTask{Name: "failure"}))
	for _, n := range []int{1, 2, -1, 3, 4} {
		b.Add(memberTask{N: n})
	}
	res, err := q.EnqueueBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, res.ID, venturi.WorkflowFailed)
	calls, counts, sums := s.snapshot()
	slices.Sort(calls)
	if !slices.Equal(calls, []string{"end", "failure"}) {
		t.Fatalf("callbacks run: %v", calls)
	}
	if c := counts["end"]; c.Total != 5 || c.Succeeded != 4 || c.Failed != 1 || c.Cancelled != 0 || c.Pending != 0 || !c.Sealed {
		t.Fatalf("on_end saw %+v", c)
	}
	if sums["end"] != 10 {
		t.Fatalf("on_end summed %d", sums["end"])
	}
	if c := counts["failure"]; c.Failed < 1 || c.Total != 5 {
		t.Fatalf("on_failure saw %+v", c)
	}
	info, err := q.Batch(ctx, res.ID)
	if err != nil || info.Total != 5 || info.Failed != 1 || info.State != venturi.WorkflowFailed {
		t.Fatalf("batch %+v %v", info, err)
	}
	if n := nodesOf(t, q, res.ID)[venturi.BatchOnSuccess]; n.Own != "dfail" {
		t.Fatalf("on_success %+v", n)
	}
}

// An open batch: members added from outside and from a member's handler, the callbacks
// wait for the seal; a sealed batch takes no more; a workflow is not a batch; an empty
// sealed batch succeeds at once.
func TestOpenBatch(t *testing.T) {
	t.Parallel()
	q, s := startBatchWorker(t)
	ctx := context.Background()
	b := venturi.NewBatch("open", venturi.OpenBatch(), venturi.OnSuccess(callbackTask{Name: "success"}))
	b.Add(memberTask{N: 1, Spawn: 2})
	res, err := q.EnqueueBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := q.AddToBatch(ctx, res.ID, memberTask{N: 5}, memberTask{N: 6})
	if err != nil || len(ids) != 2 {
		t.Fatalf("add: %v %v", ids, err)
	}
	eventually(t, within, "five members to complete", func() bool {
		info, err := q.Batch(ctx, res.ID)
		return err == nil && info.Succeeded == 5
	})
	if calls, _, _ := s.snapshot(); len(calls) != 0 {
		t.Fatalf("a callback ran before the seal: %v", calls)
	}
	if err := q.SealBatch(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, res.ID, venturi.WorkflowSucceeded)
	calls, counts, sums := s.snapshot()
	if !slices.Equal(calls, []string{"success"}) || counts["success"].Total != 5 || sums["success"] != 1+100+101+5+6 {
		t.Fatalf("callbacks %v, counts %+v, sums %v", calls, counts, sums)
	}
	if _, err := q.AddToBatch(ctx, res.ID, memberTask{N: 7}); !errors.Is(err, venturi.ErrWorkflowFinished) {
		t.Fatalf("add to a finished batch: %v", err)
	}

	wf := venturi.NewWorkflow("not a batch")
	wf.Group("g", venturi.OpenGroup())
	wres, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.AddToBatch(ctx, wres.ID, memberTask{N: 1}); !errors.Is(err, venturi.ErrNotBatch) {
		t.Fatalf("AddToBatch to a workflow: %v", err)
	}
	if _, err := q.Batch(ctx, wres.ID); !errors.Is(err, venturi.ErrNotBatch) {
		t.Fatalf("Batch of a workflow: %v", err)
	}
	if _, err := q.Batch(ctx, ulid.Make()); !errors.Is(err, venturi.ErrWorkflowNotFound) {
		t.Fatalf("Batch of nothing: %v", err)
	}

	// A cancelled open batch stays as it ended: it can no longer be sealed.
	open, err := q.EnqueueBatch(ctx, venturi.NewBatch("cancelled", venturi.OpenBatch()))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CancelWorkflow(ctx, open.ID, "not needed"); err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, open.ID, venturi.WorkflowCancelled)
	if err := q.SealBatch(ctx, open.ID); !errors.Is(err, venturi.ErrWorkflowFinished) {
		t.Fatalf("sealing a cancelled batch: %v", err)
	}
	if info := waitWorkflow(t, q, open.ID, venturi.WorkflowCancelled); info.State != venturi.WorkflowCancelled {
		t.Fatalf("the cancelled batch %+v", info)
	}

	empty, err := q.EnqueueBatch(ctx, venturi.NewBatch("empty", venturi.OnSuccess(callbackTask{Name: "empty"})))
	if err != nil {
		t.Fatal(err)
	}
	waitWorkflow(t, q, empty.ID, venturi.WorkflowSucceeded)
}
