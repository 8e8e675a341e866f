package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi"
)

// Poll checks a feed Times times, pausing between checks: a long-lived job whose journal
// grows by one entry per run.
type Poll struct {
	Feed  string `json:"feed"`
	Times int    `json:"times"`
}

// Kind names the task.
func (Poll) Kind() string { return "poll" }

// Handle polls once. Its last run reads the history: the recent entries came with the
// claim, the older ones are paged in from the database.
func (p Poll) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() < p.Times {
		return venturi.PauseInWith(0, fmt.Sprintf("poll %d: no news", run.RunCount())), nil
	}
	recent := run.History()
	older, err := run.EarlierHistory(ctx, recent[0].Seq, 5)
	if err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.CompletedWith(fmt.Sprintf("%d recent entries, the 5 before them start at %q",
		len(recent), older[0].Note)), nil
}

// A job that runs many times keeps only its recent journal entries in its row; older
// ones are paged in by Seq, the entry's number in the whole journal.
func ExampleQueue_Journal() {
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
	venturi.MustRegister[Poll](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, err := q.Enqueue(ctx, Poll{Feed: "https://example.com/feed", Times: 40})
	if err != nil {
		log.Fatal(err)
	}
	job := awaitFinished(q, res.ID)
	fmt.Printf("%s after %d runs; %d entries in all, %d recent in the row\n",
		job.State, job.RunCount, job.JournalLen, len(job.Journal))
	fmt.Println("last:", job.Journal[len(job.Journal)-1].Note)

	first, err := q.Journal(ctx, res.ID, 3, 10) // the entries before Seq 3
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range first {
		fmt.Printf("  #%d %s: %s\n", e.Seq, e.Event, e.Note)
	}
	// Output:
	// completed after 40 runs; 40 entries in all, 23 recent in the row
	// last: 22 recent entries, the 5 before them start at "poll 13: no news"
	//   #1 paused: poll 1: no news
	//   #2 paused: poll 2: no news
}
