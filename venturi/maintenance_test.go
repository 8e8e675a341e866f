package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// TestMaintenancePrunesFinishedJobs: completed and dead jobs older than their retention
// are deleted; pending jobs and recent ones stay.
func TestMaintenancePrunesFinishedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	// Worker 1 (default retention) finishes a completed and a dead job.
	w1 := startWorkerFor[failTask](t, pool, &failApp{}, fastConfig())
	done := enqueue(t, q, failTask{})
	dead := enqueue(t, q, failTask{FailRuns: 1, Permanent: true})
	waitState(t, q, done, venturi.StateCompleted)
	waitState(t, q, dead, venturi.StateDead)
	stopWorker(t, w1)
	pending := enqueue(t, q, failTask{}, venturi.After(time.Hour))
	// Worker 2 keeps completed jobs an hour but dead ones only a millisecond.
	cfg := fastConfig()
	cfg.RetainCompleted = time.Hour
	cfg.RetainDead = time.Millisecond
	w2 := startWorkerFor[failTask](t, pool, &failApp{}, cfg)
	waitPruned(t, q, dead, "the dead job")
	stopWorker(t, w2)
	for _, r := range []venturi.Result{done, pending} {
		if _, err := q.Job(ctx, r.ID); err != nil {
			t.Fatalf("job %s: %v", r.ID, err)
		}
	}
	// Worker 3 keeps completed jobs a millisecond.
	cfg.RetainCompleted = time.Millisecond
	startWorkerFor[failTask](t, pool, &failApp{}, cfg)
	waitPruned(t, q, done, "the completed job")
	if j := jobByID(t, q, pending.ID); j.State != venturi.StateScheduled {
		t.Fatalf("pending job %s", j.State)
	}
}

// waitPruned waits until maintenance has deleted the job.
func waitPruned(t *testing.T, q *venturi.Queue, r venturi.Result, what string) {
	t.Helper()
	eventually(t, within, what+" to be pruned", func() bool {
		_, err := q.Job(context.Background(), r.ID)
		return errors.Is(err, venturi.ErrNotFound)
	})
}

// TestNotifyWakesIdleWorker: with polling effectively off, enqueues still reach an idle
// worker through LISTEN/NOTIFY.
func TestNotifyWakesIdleWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.PollInterval = time.Hour
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[noteTask](w)
	venturi.MustRegister[keyedNoteTask](w)
	startWorker(t, w)
	for i := 0; i < 3; i++ {
		waitState(t, q, enqueue(t, q, noteTask{Msg: fmt.Sprint(i)}), venturi.StateCompleted)
		// Through the dedup fast path and through EnqueueTx as well.
		waitState(t, q, enqueue(t, q, keyedNoteTask{Key: fmt.Sprint("fast", i)}), venturi.StateCompleted)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := q.EnqueueTx(ctx, tx, keyedNoteTask{Key: fmt.Sprint("tx", i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		waitState(t, q, r, venturi.StateCompleted)
	}
}

type keyedNoteTask struct {
	Key string `json:"key"`
}

func (keyedNoteTask) Kind() string                 { return "keyed-note" }
func (k keyedNoteTask) DedupKey() venturi.DedupKey { return venturi.DedupKey(k.Key) }
func (keyedNoteTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// TestPollOnlyMode: without NOTIFY on either side, polling finds the jobs.
func TestPollOnlyMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{NoNotify: true})
	cfg := fastConfig()
	cfg.PollOnly = true
	startWorkerFor[noteTask](t, pool, struct{}{}, cfg)
	completeNotes(t, q, 5)
	var listeners int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'LISTEN %venturi_insert%' || current_schema() || '%'`).Scan(&listeners); err != nil {
		t.Fatal(err)
	}
	if listeners != 0 {
		t.Fatalf("%d LISTEN connections in poll-only mode", listeners)
	}
}
