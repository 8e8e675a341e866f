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

// CustomerReport builds a customer's report. At most one runs per customer; a second request
// while one runs is dropped (the running one will have the data anyway).
type CustomerReport struct {
	Customer int `json:"customer"`
}

// Kind names the task.
func (CustomerReport) Kind() string { return "customer_report" }

// Slot allows one running report per customer.
func (r CustomerReport) Slot() venturi.Slot {
	return venturi.Slot{Key: fmt.Sprintf("report/%d", r.Customer), Limit: 1, Policy: venturi.SlotDropIfRunning}
}

// Handle builds the report once the example lets it.
func (r CustomerReport) Handle(ctx context.Context, run *venturi.Run[struct{}], release chan struct{}) (venturi.Outcome, error) {
	select {
	case <-release:
	case <-ctx.Done():
		return venturi.Outcome{}, ctx.Err()
	}
	return venturi.CompletedWith("built"), nil
}

// A slot limits how many jobs with one key run at once, across all workers; its policy
// says what a job does when the slot is full.
func ExampleSlotter() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	release := make(chan struct{})
	w, err := venturi.NewWorker(pool, release, venturi.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[CustomerReport](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	first, _ := q.Enqueue(ctx, CustomerReport{Customer: 42})
	awaitJob(q, first.ID, "the first report to run", func(j *venturi.Job) bool { return j.State == venturi.StateRunning })
	second, _ := q.Enqueue(ctx, CustomerReport{Customer: 42})
	j := awaitJob(q, second.ID, "the second report to be dropped", func(j *venturi.Job) bool { return j.State == venturi.StateCancelled })
	fmt.Printf("second: %s, %s\n", j.State, j.Journal[0].Note)
	close(release)
	fmt.Println("first:", awaitFinished(q, first.ID).State)
	// Output:
	// second: cancelled, dropped: slot report/42 is full (1 of 1 running; policy DropIfRunning)
	// first: completed
}

// PaymentAPI calls a payment provider. Its limits hold across every worker: two calls at
// once, five starts a second, and a breaker that stops calling after three failures in a
// row, for a minute.
type PaymentAPI struct {
	Order int `json:"order"`
}

// Kind names the task.
func (PaymentAPI) Kind() string { return "payment_api" }

// Limits are read on the zero value when the type is registered.
func (PaymentAPI) Limits() venturi.Limits {
	return venturi.Limits{
		Concurrency: 2,
		Rate:        venturi.Rate{N: 5, Per: time.Second},
		Breaker:     venturi.Breaker{Failures: 3, Cooldown: time.Minute},
	}
}

// Handle fails: the provider is down.
func (p PaymentAPI) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Outcome{}, venturi.RetryIn(0, errors.New("provider unavailable"))
}

// After Failures failed runs in a row the breaker opens: the kind's jobs wait, without
// running and without using up their backstop, until the cooldown ends and a probe runs.
func ExampleLimiter() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[PaymentAPI](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, _ := q.Enqueue(ctx, PaymentAPI{Order: 1})
	j := awaitJob(q, res.ID, "the breaker to open", func(j *venturi.Job) bool {
		return j.Circuit != nil && j.Circuit.State == venturi.CircuitOpen && j.State == venturi.StateAvailable
	})
	fmt.Printf("breaker %s after %d failures; the job is %s after %d runs\n", j.Circuit.State, j.Circuit.Failures, j.State, j.RunCount)
	// Output:
	// breaker open after 3 failures; the job is available after 3 runs
}

// A paused queue starts no job until it is resumed, whatever workers restart meanwhile.
func ExampleQueue_PauseQueue() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	if err := q.PauseQueue(ctx, "media"); err != nil {
		log.Fatal(err)
	}
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{Queue: "media", PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Preview](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	res, _ := q.Enqueue(ctx, Preview{Image: "dog.png"})
	queues, _ := q.Queues(ctx)
	fmt.Printf("%s paused=%v available=%d\n", queues[0].Name, queues[0].Paused, queues[0].Available)
	if err := q.ResumeQueue(ctx, "media"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(awaitFinished(q, res.ID).State)
	// Output:
	// media paused=true available=1
	// completed
}
