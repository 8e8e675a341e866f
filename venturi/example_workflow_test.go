package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// ImportStep is one step of an import: fetch, parse, index, notify. A file named "bad"
// does not parse.
type ImportStep struct {
	Step string `json:"step"`
	File string `json:"file"`
}

// Kind names the task.
func (ImportStep) Kind() string { return "import-step" }

// Handle does the step.
func (s ImportStep) Handle(_ context.Context, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if s.Step == "parse" && s.File == "bad" {
		return venturi.Outcome{}, venturi.Permanent(errors.New("not a CSV file"))
	}
	return venturi.CompletedWith(s.Step + " " + s.File), nil
}

// awaitWorkflow polls the workflow until it has finished, and fails the example after
// exampleWithin.
func awaitWorkflow(q *venturi.Queue, id ulid.ULID) *venturi.WorkflowInfo {
	deadline := time.NewTimer(exampleWithin)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := q.Workflow(context.Background(), id)
		if err != nil {
			log.Fatalf("read workflow: %v", err)
		}
		if info.State != venturi.WorkflowOpen {
			return info
		}
		select {
		case <-deadline.C:
			log.Fatalf("timed out after %v waiting for workflow %s", exampleWithin, id)
		case <-tick.C:
		}
	}
}

// Two imports as workflows: fetch, then parse, then index; a compensation runs when a
// step fails, and a report once the index step ended, however. The bad file's index step
// is cancelled without a run, since what it needs failed.
func ExampleQueue_EnqueueWorkflow() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		PollInterval:        10 * time.Millisecond,
		MaintenanceInterval: 10 * time.Millisecond,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[ImportStep](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	for _, file := range []string{"good", "bad"} {
		wf := venturi.NewWorkflow("import "+file, venturi.WorkflowKey("import/"+file))
		fetch := wf.Add("fetch", ImportStep{Step: "fetch", File: file})
		parse := wf.Add("parse", ImportStep{Step: "parse", File: file}, venturi.Needs(fetch))
		index := wf.Add("index", ImportStep{Step: "index", File: file}, venturi.Needs(parse))
		wf.Add("undo", ImportStep{Step: "undo", File: file}, venturi.NeedsFailure(fetch, parse, index))
		wf.Add("report", ImportStep{Step: "report", File: file}, venturi.NeedsEnded(index))
		res, err := q.EnqueueWorkflow(ctx, wf)
		if err != nil {
			log.Fatal(err)
		}
		info := awaitWorkflow(q, res.ID)
		fmt.Printf("import %s: %s\n", file, info.State)
		nodes, err := q.WorkflowNodes(ctx, res.ID, "", 100)
		if err != nil {
			log.Fatal(err)
		}
		for _, n := range nodes { // in name order
			fmt.Printf("  %-6s %-9s %s\n", n.Name, n.JobState, n.Own)
		}
	}
	// Output:
	// import good: succeeded
	//   fetch  completed ok
	//   index  completed ok
	//   parse  completed ok
	//   report completed ok
	//   undo   cancelled skip
	// import bad: failed
	//   fetch  completed ok
	//   index  cancelled dfail
	//   parse  dead      fail
	//   report completed ok
	//   undo   completed ok
}
