package venturitest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturitest"
)

// tally is a workflow node: it sums the outputs upstream of it, outputs the sum, and
// spawns one check per upstream node; in a batch it reports the failed members instead.
type tally struct{}

func (tally) Kind() string { return "tally" }

func (tally) Handle(ctx context.Context, r *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if b, err := r.Batch(ctx); err == nil {
		return venturi.CompletedWith(fmt.Sprintf("%d of %d failed", b.Failed, b.Total)), nil
	} else if !errors.Is(err, venturi.ErrNotBatch) {
		return venturi.Outcome{}, err
	}
	outs, err := r.UpstreamOutputs(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	var first int
	if err := r.Output(ctx, "a", &first); err != nil {
		return venturi.Outcome{}, err
	}
	sum := 0
	checks := venturi.NewWorkflow("")
	for node := range outs {
		var n int
		if err := r.Output(ctx, node, &n); err != nil {
			return venturi.Outcome{}, err
		}
		sum += n
		checks.Add("check-"+node, tally{})
	}
	if _, err := r.Spawn(ctx, checks); err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.Completed(), r.SetOutput(sum)
}

// A workflow node's handler, run alone: the outputs it reads come from the options, and
// the result reports the output it set and the nodes it spawned.
func TestRunHandlerInAWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	res := venturitest.RunHandler(ctx, tally{}, struct{}{}, venturitest.RunOptions[struct{}]{
		Workflow: ulid.Make(), Node: "sum", Outputs: map[string]any{"a": 2, "b": 3},
	})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var sum int
	if err := res.DecodeOutput(&sum); err != nil || sum != 5 {
		t.Fatalf("output %d, %v", sum, err)
	}
	slices.Sort(res.Spawned)
	if !slices.Equal(res.Spawned, []string{"sum/check-a", "sum/check-b"}) {
		t.Fatalf("spawned %v", res.Spawned)
	}

	// Outside workflows the workflow calls say so.
	res = venturitest.RunHandler(ctx, tally{}, struct{}{}, venturitest.RunOptions[struct{}]{})
	if !errors.Is(res.Err, venturi.ErrNotInWorkflow) || res.Output != nil {
		t.Fatalf("outside workflows: %v, output %s", res.Err, res.Output)
	}

	// A batch's callback sees the counts it is given.
	res = venturitest.RunHandler(ctx, tally{}, struct{}{}, venturitest.RunOptions[struct{}]{
		Workflow: ulid.Make(), Node: venturi.BatchOnEnd, Batch: &venturi.BatchInfo{Total: 4, Succeeded: 3, Failed: 1},
	})
	if res.Err != nil || res.Note() != "1 of 4 failed" {
		t.Fatalf("callback: %v, note %q", res.Err, res.Note())
	}
}
