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

// ReindexSearch rebuilds a user's search index. Edits come in bursts; the index should be
// rebuilt once a burst goes quiet, and at least every minute under a steady stream.
type ReindexSearch struct {
	UserID int64 `json:"user_id"`
	Edits  int   `json:"edits"`
}

// Kind names the task.
func (ReindexSearch) Kind() string { return "reindex_search" }

// DedupKey makes a user's pending rebuilds merge candidates.
func (r ReindexSearch) DedupKey() venturi.DedupKey { return venturi.KeyOf("user", r.UserID) }

// reindexQuiet and reindexMaxWait are the debounce's delay and maximum wait.
const (
	reindexQuiet   = 2 * time.Second
	reindexMaxWait = time.Minute
)

// Merge folds the edit into the pending rebuild and pushes its due time: debounce.
func (r ReindexSearch) Merge(existing venturi.Pending[ReindexSearch, struct{}]) venturi.Merge[ReindexSearch, struct{}] {
	merged := ReindexSearch{UserID: r.UserID, Edits: existing.Payload.Edits + r.Edits}
	return existing.With(merged, existing.Carry).Debounce(reindexQuiet, reindexMaxWait)
}

// Debounce pushes the pending job's due time to now + delay on every merge, bounded by a
// maximum wait from the burst's start; the merged journal entry records the due time before
// and after (database clock).
func ExampleMerge_Debounce() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	// The first edit of a burst waits for quiet too.
	first, err := q.Enqueue(ctx, ReindexSearch{UserID: 7, Edits: 1}, venturi.After(reindexQuiet))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		res, err := q.Enqueue(ctx, ReindexSearch{UserID: 7, Edits: 1})
		if err != nil {
			log.Fatal(err)
		}
		job, err := q.Job(ctx, res.ID)
		if err != nil {
			log.Fatal(err)
		}
		e := job.Journal[len(job.Journal)-1]
		fmt.Printf("%v into the first job: %v; due %s, pushed to now+%v (later than before: %v)\n",
			res.Action, res.ID == first.ID, e.Due, e.DueAfter.Sub(e.At), e.DueAfter.After(e.DueBefore))
	}
	// Output:
	// merged into the first job: true; due debounce, pushed to now+2s (later than before: true)
	// merged into the first job: true; due debounce, pushed to now+2s (later than before: true)
	// merged into the first job: true; due debounce, pushed to now+2s (later than before: true)
}

// SyncContacts pulls a user's contacts from a remote API, at most once per window.
type SyncContacts struct {
	UserID int64 `json:"user_id"`
}

// Kind names the task.
func (SyncContacts) Kind() string { return "sync_contacts" }

// DedupKey makes a user's pending syncs merge candidates.
func (s SyncContacts) DedupKey() venturi.DedupKey { return venturi.KeyOf("user", s.UserID) }

// Merge keeps the pending sync and its due time: throttle.
func (s SyncContacts) Merge(existing venturi.Pending[SyncContacts, struct{}]) venturi.Merge[SyncContacts, struct{}] {
	return existing.Replace().Throttle()
}

// Throttle keeps the pending job's due time: the first enqueue of a window sets it, and
// every enqueue until the job runs rides that run.
func ExampleMerge_Throttle() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	first, err := q.Enqueue(ctx, SyncContacts{UserID: 7}, venturi.After(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		res, err := q.Enqueue(ctx, SyncContacts{UserID: 7}) // asks for now; the window holds
		if err != nil {
			log.Fatal(err)
		}
		job, err := q.Job(ctx, res.ID)
		if err != nil {
			log.Fatal(err)
		}
		e := job.Journal[len(job.Journal)-1]
		fmt.Printf("%v into the first job: %v; due %s, unchanged: %v\n", res.Action, res.ID == first.ID, e.Due, e.DueAfter.Equal(e.DueBefore))
	}
	// Output:
	// replaced into the first job: true; due keep, unchanged: true
	// replaced into the first job: true; due keep, unchanged: true
	// replaced into the first job: true; due keep, unchanged: true
}

// FeedPoller is a singleton service: one instance across every worker, restarted 10ms
// after each run ends.
type FeedPoller struct{}

// Kind names the task.
func (FeedPoller) Kind() string { return "feed_poller" }

// Singleton declares the service and its restart policy.
func (FeedPoller) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartAlways, Delay: 10 * time.Millisecond}
}

// PollerCursor is the poller's checkpoint: a takeover resumes from it.
type PollerCursor struct {
	Polls int `json:"polls"`
}

// PollerState is the workers' state: here only a gate the example opens once it has
// looked at the service, so that its first poll comes after that.
type PollerState struct {
	Ready <-chan struct{}
}

// Handle polls the feed once per run here; a real poller loops until Run.Shutdown closes,
// calling Run.Checkpoint as it goes, and returns PauseIn(0) to hand over.
func (FeedPoller) Handle(ctx context.Context, run *venturi.Run[PollerCursor], s PollerState) (venturi.Outcome, error) {
	select {
	case <-s.Ready:
	case <-ctx.Done():
		return venturi.Outcome{}, context.Cause(ctx)
	}
	cursor := run.CarryMut()
	cursor.Polls++
	if err := run.Checkpoint(ctx); err != nil {
		return venturi.Outcome{}, err
	}
	if cursor.Polls == 3 {
		return venturi.Cancelled("the example is over"), nil // a cancellation stops any singleton
	}
	return venturi.CompletedWith(fmt.Sprintf("poll %d", cursor.Polls)), nil
}

// A Supervised task type is a singleton service: every worker that registers it ensures its
// one job at Start, at most one run is in progress across the workers, and its restart
// policy decides what follows each run.
func ExampleSupervised() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	ready := make(chan struct{})
	for _, id := range []string{"worker-a", "worker-b"} {
		w, err := venturi.NewWorker(pool, PollerState{Ready: ready}, venturi.Config{
			ID: id, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			log.Fatal(err)
		}
		venturi.MustRegister[FeedPoller](w)
		if err := w.Start(ctx); err != nil { // ensures the poller's one job
			log.Fatal(err)
		}
		defer w.Stop(context.Background())
	}
	_, err := q.Enqueue(ctx, FeedPoller{})
	fmt.Println("enqueue refused:", errors.Is(err, venturi.ErrSingleton))

	list, err := q.Singletons(ctx)
	if err != nil || len(list) != 1 {
		log.Fatal(list, err)
	}
	job := list[0]
	close(ready) // the polls may go on
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(30 * time.Second); ; <-poll.C {
		j, err := q.Job(ctx, job.ID)
		if err != nil {
			log.Fatal(err)
		}
		if j.State == venturi.StateCancelled {
			for _, e := range j.Journal {
				fmt.Printf("run %d: %s %q, next run in %v\n", e.Run, e.Event, e.Note, e.ResumeIn)
			}
			break
		}
		if time.Now().After(deadline) {
			log.Fatal("the poller did not finish")
		}
	}
	// Output:
	// enqueue refused: true
	// run 1: completed "poll 1", next run in 10ms
	// run 2: completed "poll 2", next run in 10ms
	// run 3: cancelled "the example is over", next run in 0s
}
