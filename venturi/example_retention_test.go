package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi"
)

// Ping is a task that only completes.
type Ping struct{ N int }

// Kind names the task.
func (Ping) Kind() string { return "ping" }

// Handle completes the run.
func (p Ping) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.CompletedWith(fmt.Sprintf("pong %d", p.N)), nil
}

// A job that ends moves to the history of finished jobs, where it stays for its state's
// retention; Queue.Job and ListJobs find it there. With Discard a completed job is deleted
// as it completes: nothing is kept.
func ExampleDiscard() {
	ctx := context.Background()
	for _, retain := range []time.Duration{time.Hour, venturi.Discard} {
		pool, cleanup := exampleDB()
		w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
			RetainCompleted: retain, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			log.Fatal(err)
		}
		venturi.MustRegister[Ping](w)
		if err := w.Start(ctx); err != nil {
			log.Fatal(err)
		}
		q := venturi.NewQueue(pool, venturi.QueueConfig{})
		res, err := q.Enqueue(ctx, Ping{N: 1})
		if err != nil {
			log.Fatal(err)
		}
		j, err := q.Await(ctx, res.ID) // the job as it ended, or ErrNotFound once it is gone
		switch {
		case errors.Is(err, venturi.ErrNotFound):
			fmt.Println("kept nothing: the job is gone")
		case err != nil:
			log.Fatal(err)
		default:
			page, err := q.ListJobs(ctx, venturi.JobFilter{States: []venturi.State{venturi.StateCompleted}}, "", 10)
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("kept for an hour: %s %q, listed %d\n", j.State, j.Journal[len(j.Journal)-1].Note, len(page.Jobs))
		}
		_ = w.Stop(ctx)
		cleanup()
	}
	// Output:
	// kept for an hour: completed "pong 1", listed 1
	// kept nothing: the job is gone
}
