package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi"
)

// TestCancelTxCommitsWithTheCaller: CancelTx cancels only when the caller's transaction
// commits; a rollback leaves the job as it was, and a running job's worker hears of the
// cancel at the commit.
func TestCancelTxCommitsWithTheCaller(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE app_import (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	r := enqueue(t, q, cancellable{N: 1}, venturi.After(time.Hour))

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := q.CancelTx(ctx, tx, r.ID, "import deleted"); err != nil || res != venturi.CancelEnded {
		t.Fatalf("CancelTx = %v, %v", res, err)
	}
	if j := jobByID(t, q, r.ID); j.State != venturi.StateScheduled {
		t.Fatalf("another connection sees %s before the commit", j.State)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if j := jobByID(t, q, r.ID); j.State != venturi.StateScheduled || len(j.Journal) != 0 {
		t.Fatalf("after a rollback: %s, journal %s", j.State, eventsOf(j))
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO app_import VALUES (1)`); err != nil {
			return err
		}
		_, err := q.CancelTx(ctx, tx, r.ID, "import deleted")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if j := jobByID(t, q, r.ID); j.State != venturi.StateCancelled || lastEntry(j).Note != "import deleted" {
		t.Fatalf("after the commit: %s %q", j.State, lastEntry(j).Note)
	}

	// A running job: the stop request reaches its worker when the transaction commits.
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	startFlowWorkers[cancellable](t, pool, st, 1, fastConfig())
	running := enqueue(t, q, cancellable{N: 2, Hold: true})
	waitState(t, q, running, venturi.StateRunning)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := q.CancelTx(ctx, tx, running.ID, "owner left")
		if err == nil && res != venturi.CancelRequested {
			err = fmt.Errorf("CancelTx of a running job = %v", res)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	j := waitState(t, q, running, venturi.StateCancelled)
	if e := lastEntry(j); e.Event != venturi.EventCancelled || e.Note != "owner left: checkpoint at page 3" {
		t.Fatalf("entry %s %q", e.Event, e.Note)
	}
	if _, err := q.CancelTx(ctx, nil, r.ID, ""); err == nil {
		t.Fatal("CancelTx without a transaction succeeded")
	}
}

// TestSignalTxCommitsWithTheCaller: a signal sent with SignalTx is stored, and wakes its
// job, only when the caller's transaction commits.
func TestSignalTxCommitsWithTheCaller(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	startWorkerFor[approval](t, pool, struct{}{}, fastConfig())
	r := enqueue(t, q, approval{N: 1})
	waitState(t, q, r, venturi.StateWaiting)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.SignalTx(ctx, tx, r.ID, "approve", approvedBy{By: "nobody"}, "form-1")
	if err != nil || !res.Stored || !res.Woke {
		t.Fatalf("SignalTx = %+v, %v", res, err)
	}
	if j := jobByID(t, q, r.ID); j.State != venturi.StateWaiting {
		t.Fatalf("another connection sees %s before the commit", j.State)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countSignals(t, pool, "true"); n != 0 {
		t.Fatalf("%d signals after a rollback", n)
	}
	if _, err := q.SignalTx(ctx, nil, r.ID, "", nil, ""); !errors.Is(err, venturi.ErrInvalidSignal) {
		t.Fatalf("SignalTx without a name: %v", err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := q.SignalTx(ctx, tx, r.ID, "approve", approvedBy{By: "ann"}, "form-1")
		if err == nil && (!res.Stored || !res.Woke) {
			err = fmt.Errorf("SignalTx = %+v", res)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	j := waitState(t, q, r, venturi.StateCompleted)
	if n := lastEntry(j).Note; n != "approved by ann (1 signals, carry 7)" {
		t.Fatalf("note %q", n)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := q.SignalTx(ctx, tx, r.ID, "approve", nil, "form-2")
		return err
	})
	if !errors.Is(err, venturi.ErrJobFinished) {
		t.Fatalf("SignalTx to a completed job: %v", err)
	}
}

// keyedApproval is approval with a dedup key: an enqueue of the key merges into the job
// once a signal or the timeout made it pending again.
type keyedApproval struct {
	Key string
	N   int
}

func (keyedApproval) Kind() string                 { return "keyed_approval" }
func (k keyedApproval) DedupKey() venturi.DedupKey { return venturi.DedupKey(k.Key) }
func (k keyedApproval) Handle(ctx context.Context, run *venturi.Run[int], st struct{}) (venturi.Outcome, error) {
	return approval{N: k.N}.Handle(ctx, run, st)
}

// TestWaitedAfterAMergeIntoTheWokenJob: an enqueue merged into a job its signal woke,
// before a worker claimed it, leaves a merged entry after the waiting one; the next run
// still learns that it waited and reads the signal (it used to wait again).
func TestWaitedAfterAMergeIntoTheWokenJob(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[keyedApproval](w)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := enqueue(t, q, keyedApproval{Key: "k", N: 1})
	waitState(t, q, r, venturi.StateWaiting)
	stopWorker(t, w)
	if res, err := q.Signal(ctx, r.ID, "approve", approvedBy{By: "ann"}, ""); err != nil || !res.Woke {
		t.Fatalf("Signal = %+v, %v", res, err)
	}
	if m := enqueue(t, q, keyedApproval{Key: "k", N: 2}); m.Action == venturi.ActionInserted || m.ID != r.ID {
		t.Fatalf("enqueue of the key: %v into %s, want merged into %s", m.Action, m.ID, r.ID)
	}
	startWorkerFor[keyedApproval](t, pool, struct{}{}, fastConfig())
	j := waitState(t, q, r, venturi.StateCompleted)
	// (The merge replaced the payload and, with it, the carry.)
	if got := eventsOf(j); got != "waiting,merged,completed" || lastEntry(j).Note != "approved by ann (1 signals, carry 0)" {
		t.Fatalf("journal %s, note %q", got, lastEntry(j).Note)
	}
}
