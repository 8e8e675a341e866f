package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi"
)

// stepsState counts how often each step ran, by name.
type stepsState struct {
	mu   sync.Mutex
	runs map[string]int
}

func (s *stepsState) ran(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[name]++
	return s.runs[name]
}

func (s *stepsState) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[name]
}

// threeSteps reserves, charges (failing the first time) and mails; the first run also
// pauses after the reservation to show a checkpoint between steps.
type threeSteps struct{ Order int }

func (threeSteps) Kind() string { return "three_steps" }
func (t threeSteps) Handle(ctx context.Context, run *venturi.Run[struct{}], st *stepsState) (venturi.Outcome, error) {
	seat, err := venturi.Step(ctx, run, "reserve", func(ctx context.Context) (string, error) {
		st.ran("reserve")
		return fmt.Sprintf("seat-%d", t.Order), nil
	})
	if err != nil {
		return venturi.Outcome{}, err
	}
	if run.RunCount() == 1 {
		return venturi.PauseIn(0), nil // continue now, in a new run
	}
	charge, err := venturi.Step(ctx, run, "charge", func(ctx context.Context) (int, error) {
		if st.ran("charge") == 1 {
			return 0, errors.New("card declined, try again")
		}
		return 4200, nil
	})
	if err != nil {
		return venturi.Outcome{}, err
	}
	if _, err := venturi.Step(ctx, run, "mail", func(ctx context.Context) (bool, error) {
		st.ran("mail")
		return true, nil
	}); err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.CompletedWith(fmt.Sprintf("%s charged %d", seat, charge)), nil
}

// TestStepsAreMemoized: across a pause and a failed run, each completed step ran once;
// the failed one ran again; the job's memo lists them in order.
func TestStepsAreMemoized(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	st := &stepsState{runs: map[string]int{}}
	startWorkerFor[threeSteps](t, pool, st, fastConfig())
	r := enqueue(t, q, threeSteps{Order: 7})
	j := waitState(t, q, r, venturi.StateCompleted)
	if lastEntry(j).Note != "seat-7 charged 4200" || j.RunCount != 3 {
		t.Fatalf("note %q after %d runs (%s)", lastEntry(j).Note, j.RunCount, eventsOf(j))
	}
	if st.count("reserve") != 1 || st.count("charge") != 2 || st.count("mail") != 1 {
		t.Fatalf("step runs: %v", st.runs)
	}
	steps, err := q.Steps(context.Background(), r.ID)
	if err != nil || len(steps) != 3 || steps[0].Name != "reserve" || steps[1].Name != "charge" || steps[1].Run != 3 || string(steps[1].Result) != "4200" {
		t.Fatalf("steps %+v, %v", steps, err)
	}
}

// txStep inserts a row and memoizes in one transaction, then fails the run once: the
// next run skips the step, so the row exists exactly once.
type txStep struct{ N int }

func (txStep) Kind() string { return "tx_step" }
func (s txStep) Handle(ctx context.Context, run *venturi.Run[struct{}], pool dbPool) (venturi.Outcome, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	defer tx.Rollback(ctx)
	if _, err := venturi.StepTx(ctx, run, tx, "insert", func(ctx context.Context, tx pgx.Tx) (int, error) {
		_, err := tx.Exec(ctx, "INSERT INTO step_effect (n) VALUES ($1)", s.N)
		return s.N, err
	}); err != nil {
		return venturi.Outcome{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, err
	}
	if run.RunCount() == 1 {
		return venturi.Outcome{}, errors.New("crash after the step committed")
	}
	return venturi.Completed(), nil
}

// dbPool is what txStep needs of a pool.
type dbPool interface {
	Begin(context.Context) (pgx.Tx, error)
}

// TestStepTxCommitsEffectAndMemoTogether: a step's database effect and its memo commit
// together; the run that fails after the commit does not repeat the effect.
func TestStepTxCommitsEffectAndMemoTogether(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	if _, err := pool.Exec(context.Background(), "CREATE TABLE step_effect (n int)"); err != nil {
		t.Fatal(err)
	}
	startWorkerFor[txStep](t, pool, dbPool(pool), fastConfig())
	j := waitState(t, q, enqueue(t, q, txStep{N: 5}), venturi.StateCompleted)
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM step_effect").Scan(&n); err != nil || n != 1 || j.RunCount != 2 {
		t.Fatalf("%d effects after %d runs (%v)", n, j.RunCount, err)
	}
}

// fencedStep's step waits until the test has taken its job's lease away.
type fencedStep struct{}

type fencedState struct {
	started chan struct{}
	go_     chan struct{}
	err     chan error
}

func (fencedStep) Kind() string { return "fenced_step" }
func (fencedStep) Handle(ctx context.Context, run *venturi.Run[struct{}], st fencedState) (venturi.Outcome, error) {
	_, err := venturi.Step(ctx, run, "effect", func(ctx context.Context) (int, error) {
		close(st.started)
		<-st.go_
		return 1, nil
	})
	st.err <- err
	return venturi.Outcome{}, err
}

// TestStepOfALostRunIsNotMemoized: a run whose token no longer matches gets ErrLeaseLost
// from Step and leaves no memo.
func TestStepOfALostRunIsNotMemoized(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	st := fencedState{started: make(chan struct{}), go_: make(chan struct{}), err: make(chan error, 1)}
	startWorkerFor[fencedStep](t, pool, st, fastConfig())
	r := enqueue(t, q, fencedStep{})
	recv(t, (<-chan struct{})(st.started), "the step to start")
	if _, err := pool.Exec(context.Background(), "UPDATE venturi_job SET lease_token = lease_token + 1000000 WHERE id = $1", r.ID[:]); err != nil {
		t.Fatal(err)
	}
	close(st.go_)
	if err := recv(t, (<-chan error)(st.err), "the step's result"); !errors.Is(err, venturi.ErrLeaseLost) {
		t.Fatalf("Step = %v, want ErrLeaseLost", err)
	}
	if steps, err := q.Steps(context.Background(), r.ID); err != nil || len(steps) != 0 {
		t.Fatalf("steps %+v, %v", steps, err)
	}
}

// heldStep memoizes a step in its own transaction and keeps that transaction open (the
// job's row locked by the memo) until the test releases it; holdOpen blocks until then.
type heldStep struct{ Hold bool }

type heldState struct {
	pool     dbPool
	locked   chan struct{} // the memo is written, its transaction open
	release  chan struct{}
	blocking chan struct{} // the other job runs
}

func (heldStep) Kind() string { return "held_step" }
func (s heldStep) Handle(ctx context.Context, run *venturi.Run[struct{}], st heldState) (venturi.Outcome, error) {
	if !s.Hold {
		close(st.blocking)
		select {
		case <-st.release:
		case <-ctx.Done():
			return venturi.Outcome{}, ctx.Err()
		}
		return venturi.Completed(), nil
	}
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	defer tx.Rollback(ctx)
	if _, err := venturi.StepTx(ctx, run, tx, "memo", func(ctx context.Context, tx pgx.Tx) (int, error) { return 1, nil }); err != nil {
		return venturi.Outcome{}, err
	}
	close(st.locked)
	select {
	case <-st.release:
	case <-ctx.Done():
		return venturi.Outcome{}, ctx.Err()
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.Completed(), nil
}

// TestLeaseExtensionDoesNotWaitForAnOpenStepTx: a step's memo key-share locks its job's
// row until the step's transaction commits (so that no rescue can end the run meanwhile);
// the worker's lease extension does not conflict with that lock: the worker's other runs
// and the holding run itself keep their leases while the transaction is open, and the run
// that holds it completes.
func TestLeaseExtensionDoesNotWaitForAnOpenStepTx(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := heldState{pool: pool, locked: make(chan struct{}), release: make(chan struct{}), blocking: make(chan struct{})}
	cfg := fastConfig()
	cfg.Lease = 6 * time.Second // extended every 2 s; a run self-fences 1 s before its lease ends
	startWorkerFor[heldStep](t, pool, st, cfg)
	other := enqueue(t, q, heldStep{})
	recv(t, (<-chan struct{})(st.blocking), "the other job to start")
	held := enqueue(t, q, heldStep{Hold: true})
	recv(t, (<-chan struct{})(st.locked), "the step's memo to be written")
	var before time.Time
	if err := pool.QueryRow(context.Background(), `SELECT lease_expires_at FROM venturi_job WHERE id = $1`, other.ID[:]).Scan(&before); err != nil {
		t.Fatal(err)
	}
	eventually(t, within, "the other run's lease to be extended while the step's transaction is open", func() bool {
		var now time.Time
		err := pool.QueryRow(context.Background(), `SELECT lease_expires_at FROM venturi_job WHERE id = $1`, other.ID[:]).Scan(&now)
		return err == nil && now.After(before)
	})
	var heldBefore time.Time
	if err := pool.QueryRow(context.Background(), `SELECT lease_expires_at FROM venturi_job WHERE id = $1`, held.ID[:]).Scan(&heldBefore); err != nil {
		t.Fatal(err)
	}
	eventually(t, within, "the held run's own lease to be extended while its step's transaction is open", func() bool {
		var now time.Time
		err := pool.QueryRow(context.Background(), `SELECT lease_expires_at FROM venturi_job WHERE id = $1`, held.ID[:]).Scan(&now)
		return err == nil && now.After(heldBefore)
	})
	// The lock's contract: the rescue's lock (FOR UPDATE SKIP LOCKED) passes the row by,
	// while a no-key update (the extension, a stop request) takes it without waiting.
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT 1 FROM venturi_job WHERE id = $1 FOR UPDATE SKIP LOCKED) r`, held.ID[:]).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			t.Errorf("a rescue's lock took the row of a run whose StepTx is open")
		}
		_, err := tx.Exec(context.Background(), `SELECT 1 FROM venturi_job WHERE id = $1 FOR NO KEY UPDATE NOWAIT`, held.ID[:])
		return err
	})
	if err != nil {
		t.Fatalf("a no-key lock of the row of a run whose StepTx is open: %v", err)
	}
	close(st.release)
	if j := waitFinished(t, q, held.ID); j.State != venturi.StateCompleted {
		t.Fatalf("the run that held its step's transaction open ended %s", j.State)
	}
	if j := waitFinished(t, q, other.ID); j.State != venturi.StateCompleted {
		t.Fatalf("the other run ended %s", j.State)
	}
}
