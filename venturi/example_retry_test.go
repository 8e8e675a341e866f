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

// Charge charges a card through a payment gateway. The gateway here is scripted by card
// name, to show each way a run can fail.
type Charge struct {
	Card string `json:"card"`
}

// Kind names the task.
func (Charge) Kind() string { return "charge" }

// Handle charges the card.
func (c Charge) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	switch c.Card {
	case "flaky": // times out twice, then goes through
		if run.RunCount() <= 2 {
			return venturi.Outcome{}, errors.New("gateway timeout") // a plain error retries with backoff
		}
	case "throttled": // asks to come back later, as an HTTP Retry-After would
		if run.RunCount() == 1 {
			return venturi.Outcome{}, venturi.RetryIn(20*time.Millisecond, errors.New("rate limited"))
		}
	case "declined": // retrying cannot help
		return venturi.Outcome{}, venturi.Permanent(errors.New("card declined"))
	case "broken": // fails every time: the backstop (Config.MaxFailures) ends it
		return venturi.Outcome{}, errors.New("gateway unreachable")
	}
	return venturi.CompletedWith("charged"), nil
}

// A plain error retries with backoff, RetryIn retries after a delay of the handler's
// choosing, Permanent sends the job to dead at once, and Config.MaxFailures is the
// backstop for jobs that keep failing.
func ExamplePermanent() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		Backoff:             venturi.Backoff{Base: time.Millisecond, Cap: 10 * time.Millisecond},
		JitterFraction:      -1, // no jitter: the delays below are exact
		MaxFailures:         3,  // the third failed run is the last
		PollInterval:        10 * time.Millisecond,
		MaintenanceInterval: 10 * time.Millisecond, // promotes scheduled retries
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Charge](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	cards := []string{"flaky", "throttled", "declined", "broken"}
	charges := make([]venturi.Result, len(cards))
	for i, card := range cards {
		if charges[i], err = q.Enqueue(ctx, Charge{Card: card}); err != nil {
			log.Fatal(err)
		}
	}
	for i, card := range cards {
		job := awaitFinished(q, charges[i].ID)
		fmt.Printf("%s: %s, %d failures\n", card, job.State, job.Failures)
		for _, e := range job.Journal {
			if e.Event == venturi.EventFailed {
				fmt.Printf("  run %d %s: %s (retry in %v)\n", e.Run, e.Event, e.Note, e.ResumeIn)
				continue
			}
			fmt.Printf("  run %d %s: %s\n", e.Run, e.Event, e.Note)
		}
	}
	// Output:
	// flaky: completed, 2 failures
	//   run 1 failed: gateway timeout (retry in 0s)
	//   run 2 failed: gateway timeout (retry in 0s)
	//   run 3 completed: charged
	// throttled: completed, 1 failures
	//   run 1 failed: rate limited (retry in 20ms)
	//   run 2 completed: charged
	// declined: dead, 1 failures
	//   run 1 dead: card declined
	// broken: dead, 3 failures
	//   run 1 failed: gateway unreachable (retry in 0s)
	//   run 2 failed: gateway unreachable (retry in 0s)
	//   run 3 dead: backstop reached after 3 failures: gateway unreachable
}
