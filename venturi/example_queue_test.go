package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi"
)

// Preview renders an image preview; its jobs go to the queue "media", which a fleet of
// workers with the image libraries serves.
type Preview struct {
	Image string `json:"image"`
}

// Kind names the task.
func (Preview) Kind() string { return "thumbnail" }

// Queue puts the task's jobs in the queue "media".
func (Preview) Queue() string { return "media" }

// Handle renders the preview.
func (t Preview) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.CompletedWith("rendered " + t.Image), nil
}

// A task names its queue; a worker claims from one queue.
func ExampleQueuer() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		Queue:        "media", // without it, the worker claims from venturi.DefaultQueue
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Preview](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, err := q.Enqueue(ctx, Preview{Image: "cat.png"})
	if err != nil {
		log.Fatal(err)
	}
	job := awaitFinished(q, res.ID)
	var queue string
	if err := pool.QueryRow(ctx, "SELECT queue FROM venturi_job_all WHERE id = $1", res.ID[:]).Scan(&queue); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s in queue %s: %s\n", job.State, queue, job.Journal[0].Note)
	// Output:
	// completed in queue media: rendered cat.png
}
