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
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	// Worker 1 (default retention) finishes a completed and a dead job.
	w1 := newWorker(t, pool, &failApp{}, fastConfig())
	venturi.MustRegister[failTask](w1)
	startWorker(t, w1)
	done, err := q.Enqueue(ctx, failTask{})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := q.Enqueue(ctx, failTask{FailRuns: 1, Permanent: true})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, q, done, venturi.StateCompleted)
	waitState(t, q, dead, venturi.StateDead)
	stopWorker(t, w1)
	pending, err := q.Enqueue(ctx, failTask{}, venturi.After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Worker 2 keeps completed jobs an hour but dead ones only a millisecond.
	cfg := fastConfig()
	cfg.RetainCompleted = time.Hour
	cfg.RetainDead = time.Millisecond
	w2 := newWorker(t, pool, &failApp{}, cfg)
	venturi.MustRegister[failTask](w2)
	startWorker(t, w2)
	eventually(t, within, "the dead job to be pruned", func() bool {
		_, err := q.Job(ctx, dead.ID)
		return errors.Is(err, venturi.ErrNotFound)
	})
	stopWorker(t, w2)
	for _, r := range []venturi.Result{done, pending} {
		if _, err := q.Job(ctx, r.ID); err != nil {
			t.Fatalf("job %s: %v", r.ID, err)
		}
	}
	// Worker 3 keeps completed jobs a millisecond.
	cfg.RetainCompleted = time.Millisecond
	w3 := newWorker(t, pool, &failApp{}, cfg)
	venturi.MustRegister[failTask](w3)
	startWorker(t, w3)
	eventually(t, within, "the completed job to be pruned", func() bool {
		_, err := q.Job(ctx, done.ID)
		return errors.Is(err, venturi.ErrNotFound)
	})
	if j := jobByID(t, q, pending.ID); j.State != venturi.StateScheduled {
		t.Fatalf("pending job %s", j.State)
	}
}

// TestNotifyWakesIdleWorker: with polling effectively off, enqueues still reach an idle
// worker through LISTEN/NOTIFY.
func TestNotifyWakesIdleWorker(t *testing.T) {
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	cfg := fastConfig()
	cfg.PollInterval = time.Hour
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[noteTask](w)
	venturi.MustRegister[keyedNoteTask](w)
	startWorker(t, w)
	for i := 0; i < 3; i++ {
		r, err := q.Enqueue(ctx, noteTask{Msg: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, q, r, venturi.StateCompleted)
		// Through the dedup fast path and through EnqueueTx as well.
		r, err = q.Enqueue(ctx, keyedNoteTask{Key: fmt.Sprint("fast", i)})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, q, r, venturi.StateCompleted)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err = q.EnqueueTx(ctx, tx, keyedNoteTask{Key: fmt.Sprint("tx", i)})
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
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{NoNotify: true})
	cfg := fastConfig()
	cfg.PollOnly = true
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
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
