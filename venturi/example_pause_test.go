package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi"
)

// Import loads a file's rows in batches, one batch per run.
type Import struct {
	File string `json:"file"`
	Rows int    `json:"rows"`
}

// ImportProgress is the import's carry: the checkpoint kept between its runs.
type ImportProgress struct {
	Done int `json:"done"`
}

// importBatch is how many rows one run imports.
const importBatch = 10

// Kind names the task.
func (Import) Kind() string { return "import" }

// Handle imports the next batch, checkpoints it in the carry and pauses until the whole
// file is in. A pause is not a failure: the carry is persisted and the backstop is not
// consumed.
func (imp Import) Handle(ctx context.Context, run *venturi.Run[ImportProgress], _ struct{}) (venturi.Outcome, error) {
	progress := run.CarryMut() // the zero value on the first run
	n := min(importBatch, imp.Rows-progress.Done)
	// ... import rows [progress.Done, progress.Done+n) of imp.File here ...
	progress.Done += n
	if progress.Done < imp.Rows {
		// Yield at once: the job goes back to available with its carry and runs again.
		return venturi.PauseInWith(0, fmt.Sprintf("imported %d/%d", progress.Done, imp.Rows)), nil
	}
	return venturi.CompletedWith(fmt.Sprintf("imported %d rows in %d runs", imp.Rows, run.RunCount())), nil
}

// A long job works in steps: each run checkpoints its progress in the carry and pauses,
// and the next run resumes from the checkpoint.
func ExamplePauseIn() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Import](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, err := q.Enqueue(ctx, Import{File: "customers.csv", Rows: 25})
	if err != nil {
		log.Fatal(err)
	}
	job := awaitFinished(q, res.ID)
	fmt.Printf("%s after %d runs, %d failures\n", job.State, job.RunCount, job.Failures)
	printJournal(job)
	// Output:
	// completed after 3 runs, 0 failures
	//   run 1 paused: imported 10/25
	//   run 2 paused: imported 20/25
	//   run 3 completed: imported 25 rows in 3 runs
}
