package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi"
)

// Reindex rebuilds a search index one document at a time.
type Reindex struct {
	Docs int `json:"docs"`
}

// ReindexProgress is the reindex's carry: the next document to index.
type ReindexProgress struct {
	Next int `json:"next"`
}

// Kind names the task.
func (Reindex) Kind() string { return "reindex" }

// Export writes a report; unlike Reindex it does not watch for shutdown.
type Export struct{}

// Kind names the task.
func (Export) Kind() string { return "export" }

// Search is the reindex worker's state. Documents arrive on Docs, one per receive; the
// example feeds them by hand to stop the first worker at a known document.
type Search struct {
	Docs     <-chan struct{}
	Exported <-chan struct{} // closed when an export may finish
	Started  chan<- string   // each handler reports its start
}

// Handle indexes documents until all are done or the worker shuts down. At shutdown it
// checkpoints in the carry and pauses, so the next worker resumes where this one stopped.
func (r Reindex) Handle(ctx context.Context, run *venturi.Run[ReindexProgress], s Search) (venturi.Outcome, error) {
	p := run.Carry()
	from := p.Next
	s.Started <- "reindex"
	for p.Next < r.Docs {
		select {
		case <-run.Shutdown(): // Stop has begun (run.ShuttingDown() polls the same signal)
			run.SetCarry(p)
			return venturi.PauseInWith(0, fmt.Sprintf("shutdown at doc %d", p.Next)), nil
		case <-ctx.Done():
			return venturi.Outcome{}, ctx.Err()
		case <-s.Docs:
			p.Next++ // index document p.Next here
		}
	}
	return venturi.CompletedWith(fmt.Sprintf("indexed docs %d to %d", from, r.Docs-1)), nil
}

// Handle waits for the export to be ready, ignoring run.Shutdown: when ShutdownGrace
// ends, Stop cancels ctx and the run is journaled as interrupted.
func (Export) Handle(ctx context.Context, run *venturi.Run[struct{}], s Search) (venturi.Outcome, error) {
	s.Started <- "export"
	select {
	case <-ctx.Done():
		return venturi.Outcome{}, ctx.Err()
	case <-s.Exported:
		return venturi.CompletedWith("exported"), nil
	}
}

// Stop shuts down gracefully: running handlers see Run.Shutdown and may pause with
// their carry; those still running after ShutdownGrace are cancelled and interrupted.
// Neither counts as a failure, and the next worker resumes the jobs.
func ExampleWorker_Stop() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	startWorker := func(id string, s Search) *venturi.Worker[Search] {
		w, err := venturi.NewWorker(pool, s, venturi.Config{
			ID:            id,                     // named in the journal
			ShutdownGrace: 100 * time.Millisecond, // how long Stop waits before cancelling
			PollInterval:  10 * time.Millisecond,
			Logger:        slog.New(slog.DiscardHandler),
		})
		if err != nil {
			log.Fatal(err)
		}
		venturi.MustRegister[Reindex](w)
		venturi.MustRegister[Export](w)
		if err := w.Start(ctx); err != nil {
			log.Fatal(err)
		}
		return w
	}

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	reindex, err := q.Enqueue(ctx, Reindex{Docs: 10})
	if err != nil {
		log.Fatal(err)
	}
	export, err := q.Enqueue(ctx, Export{})
	if err != nil {
		log.Fatal(err)
	}

	// The first worker gets three documents, then stops while both handlers run.
	docs, started := make(chan struct{}), make(chan string, 2)
	w1 := startWorker("worker-1", Search{Docs: docs, Exported: make(chan struct{}), Started: started})
	<-started
	<-started
	for range 3 {
		docs <- struct{}{}
	}
	if err := w1.Stop(context.Background()); err != nil {
		log.Fatal(err)
	}

	// The second worker has every document at hand, and the export is ready.
	ready := make(chan struct{})
	close(ready)
	w2 := startWorker("worker-2", Search{Docs: ready, Exported: ready, Started: started})
	defer w2.Stop(context.Background())

	for _, res := range []venturi.Result{reindex, export} {
		job := awaitFinished(q, res.ID)
		fmt.Printf("%s: %s, %d failures\n", job.Kind, job.State, job.Failures)
		for _, e := range job.Journal {
			fmt.Printf("  run %d on %s %s: %s\n", e.Run, e.Worker, e.Event, e.Note)
		}
	}
	// Output:
	// reindex: completed, 0 failures
	//   run 1 on worker-1 paused: shutdown at doc 3
	//   run 2 on worker-2 completed: indexed docs 3 to 9
	// export: completed, 0 failures
	//   run 1 on worker-1 interrupted: interrupted by shutdown: context canceled
	//   run 2 on worker-2 completed: exported
}
