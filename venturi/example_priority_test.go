package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi"
)

// Report builds a report at normal priority.
type Report struct {
	Name string `json:"name"`
}

// Kind names the task.
func (Report) Kind() string { return "report" }

// Handle records that the report ran.
func (r Report) Handle(ctx context.Context, run *venturi.Run[struct{}], ran chan<- string) (venturi.Outcome, error) {
	ran <- "report " + r.Name
	return venturi.Completed(), nil
}

// Alert pages someone; it runs before any waiting normal-priority job.
type Alert struct {
	Message string `json:"message"`
}

// Kind names the task.
func (Alert) Kind() string { return "alert" }

// Priority makes Alert a Prioritizer: a higher priority is claimed first.
func (Alert) Priority() venturi.Priority { return venturi.PriorityHigh }

// Handle records that the alert ran.
func (a Alert) Handle(ctx context.Context, run *venturi.Run[struct{}], ran chan<- string) (venturi.Outcome, error) {
	ran <- "alert " + a.Message
	return venturi.Completed(), nil
}

// Jobs are claimed by priority, then by due time: After and At set the due time, and a
// job is not claimed before it.
func ExampleAfter() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	// Enqueued before any worker runs, in this order.
	results, err := q.EnqueueMany(ctx, []venturi.Task{Report{Name: "daily"}, Alert{Message: "disk full"}})
	if err != nil {
		log.Fatal(err)
	}
	soon, err := q.Enqueue(ctx, Report{Name: "in 50ms"}, venturi.After(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	overdue, err := q.Enqueue(ctx, Report{Name: "overdue"}, venturi.At(time.Now().Add(-time.Hour)))
	if err != nil {
		log.Fatal(err)
	}
	results = append(results, soon, overdue)
	for _, res := range results {
		job, err := q.Job(ctx, res.ID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s: %s\n", job.Kind, job.Payload, job.State)
	}

	// One handler at a time, so the jobs run in claim order.
	ran := make(chan string, len(results))
	w, err := venturi.NewWorker(pool, (chan<- string)(ran), venturi.Config{
		Concurrency:         1,
		PollInterval:        10 * time.Millisecond,
		MaintenanceInterval: 10 * time.Millisecond, // makes scheduled jobs available when due
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Report](w)
	venturi.MustRegister[Alert](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	for _, res := range results {
		awaitFinished(q, res.ID)
	}
	for range results {
		fmt.Println("ran", <-ran)
	}
	// Output:
	// report {"name": "daily"}: available
	// alert {"message": "disk full"}: available
	// report {"name": "in 50ms"}: scheduled
	// report {"name": "overdue"}: available
	// ran alert disk full
	// ran report overdue
	// ran report daily
	// ran report in 50ms
}
