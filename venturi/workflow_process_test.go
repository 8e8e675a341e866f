package venturi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// procFlow is a workflow node run by worker processes: it prints that it started, holds
// its first run forever when Hold is set (ignoring cancellation: only a kill ends it),
// spawns Spawn children, and outputs the sum of what is upstream of it plus one.
type procFlow struct {
	Node  string `json:"node"`
	Hold  bool   `json:"hold,omitempty"`
	Spawn int    `json:"spawn,omitempty"`
}

func (procFlow) Kind() string { return "proc_flow" }

func (p procFlow) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	fmt.Printf("FLOW-STARTED %s run %d\n", p.Node, run.RunCount())
	if p.Hold && run.RunCount() == 1 {
		select {} // until the process is killed
	}
	if p.Spawn > 0 {
		w := venturi.NewWorkflow("")
		for i := range p.Spawn {
			name := fmt.Sprintf("c%d", i)
			w.Add(name, procFlow{Node: p.Node + "/" + name})
		}
		if _, err := run.Spawn(ctx, w); err != nil {
			return venturi.Outcome{}, err
		}
	}
	outs, err := run.UpstreamOutputs(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	sum := 1
	for _, b := range outs {
		var n int
		if err := json.Unmarshal(b, &n); err != nil {
			return venturi.Outcome{}, venturi.Permanent(err)
		}
		sum += n
	}
	return venturi.Completed(), run.SetOutput(sum)
}

// A workflow across processes: a worker process is killed while it runs the node that
// spawns; another process rescues the node, whose second run spawns the children (the
// killed run spawned nothing), and the node that needs it runs once, after them, reading
// their outputs.
func TestWorkflowSurvivesAKilledWorkerProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	c := startChild(t, pool)
	wf := venturi.NewWorkflow("across processes")
	split := wf.Add("split", procFlow{Node: "split", Hold: true, Spawn: 3})
	wf.Add("sum", procFlow{Node: "sum"}, venturi.Needs(split))
	res, err := q.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, within, "the child to start split", func() bool { return c.saw("FLOW-STARTED split run 1") })
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()

	startWorkerFor[procFlow](t, pool, struct{}{}, venturi.Config{Lease: time.Second, MaintenanceInterval: 100 * time.Millisecond,
		ID: "rescuer", Logger: testLogger()})
	actx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	info, err := q.AwaitWorkflow(actx, res.ID)
	if err != nil || info.State != venturi.WorkflowSucceeded || info.Nodes != 5 {
		t.Fatalf("workflow %+v, %v", info, err)
	}
	if j := jobByID(t, q, res.Jobs["split"]); eventsOf(j) != "abandoned,completed" {
		t.Fatalf("split's journal %s", eventsOf(j))
	}
	// split's output counts nothing upstream (1); each child's is 1; sum's 1 + 1 + 3.
	var sum int
	if err := q.WorkflowOutput(ctx, res.ID, "sum", &sum); err != nil || sum != 5 {
		t.Fatalf("sum's output %d, %v", sum, err)
	}
	if j := jobByID(t, q, res.Jobs["sum"]); j.RunCount != 1 {
		t.Fatalf("sum ran %d times", j.RunCount)
	}
}
