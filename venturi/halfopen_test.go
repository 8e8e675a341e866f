package venturi_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// holdTask runs until its context ends (its worker is cut off or stopped), then completes
// on the next run, which reports on its channel.
type holdTask struct{}

func (holdTask) Kind() string { return "hold" }

type holdState struct {
	started chan int // the run's number
}

func (holdTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s holdState) (venturi.Outcome, error) {
	s.started <- run.RunCount()
	if run.RunCount() > 1 {
		return venturi.Completed(), nil
	}
	<-ctx.Done()
	return venturi.Outcome{}, context.Cause(ctx)
}

// TestMaintainerCutOffMidTransactionDoesNotHoldUpRescue: the maintenance round of a worker
// is cut off by a half-open network (nothing forwarded, nothing closed) while its
// transaction holds the maintenance lock. Its server session must not keep that lock, and
// with it every other worker's rescue, until the network heals: the round's transaction
// ends on the server once it has been idle for a fraction of the lease. Another worker
// then rescues the cut worker's run and runs it again, before any heal. (The chaos suite's
// half-open invariant failed when the cut worker happened to be the maintainer: rescue
// waited for the heal.)
func TestMaintainerCutOffMidTransactionDoesNotHoldUpRescue(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	direct := newDB(t)
	q := venturi.NewQueue(direct, venturi.QueueConfig{})
	viaProxy, proxy := proxiedPool(t, direct)
	defer proxy.Heal() // before the workers stop (cleanups run after this)

	st := holdState{started: make(chan int, 4)}
	cfg := fastConfig()
	cfg.Lease = 2 * time.Second
	cut := newWorker(t, viaProxy, st, cfg)
	venturi.MustRegister[holdTask](cut)
	startWorker(t, cut)
	r := enqueue(t, q, holdTask{})
	if n := recv(t, st.started, "the first run"); n != 1 {
		t.Fatalf("run %d, want 1", n)
	}

	// Stop the cut worker's maintenance round inside its transaction: its last statement
	// (the event stream's prune) waits for a table lock the test holds.
	lock, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `LOCK TABLE venturi_event IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	eventually(t, within, "the maintenance round to wait for the lock", func() bool {
		var waiting bool
		err := direct.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
			WHERE relation = 'venturi_event'::regclass AND NOT granted)`).Scan(&waiting)
		return err == nil && waiting
	})
	proxy.Cut()
	if err := lock.Rollback(ctx); err != nil { // the round goes on, on the server, and idles
		t.Fatal(err)
	}

	other := newWorker(t, direct, st, cfg)
	venturi.MustRegister[holdTask](other)
	startWorker(t, other)
	if n := recv(t, st.started, "the run to be rescued and run again while the network is cut"); n != 2 {
		t.Fatalf("run %d, want 2", n)
	}
	j := waitState(t, q, r, venturi.StateCompleted)
	if j.Journal[0].Event != venturi.EventAbandoned {
		t.Fatalf("first run ended %q, want abandoned; journal %+v", j.Journal[0].Event, j.Journal)
	}
}

// slottedHold is holdTask with a slot: its jobs are gated, claimed by the gated claim,
// which locks the slot's gate stripe until the claim's transaction ends.
type slottedHold struct{ holdTask }

func (slottedHold) Kind() string { return "slotted-hold" }

func (slottedHold) Slot() venturi.Slot { return venturi.Slot{Key: "the-slot"} }

// TestClaimCutOffBeforeItsCommitDoesNotHoldUpOtherWorkers: a worker's claim (a batch in a
// transaction committed once its results are read) is cut off by a half-open network
// after the server ran it, before its COMMIT. Its server session sits idle in that
// transaction, holding the claimed job's row and the gate stripe of the job's slot. It
// must not keep them until the network heals: the server ends the transaction once idle
// for a fraction of the lease, and another worker claims and runs the job. Before, every
// other worker's gated claim waited for the stripe and timed out until the heal.
func TestClaimCutOffBeforeItsCommitDoesNotHoldUpOtherWorkers(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	direct := newDB(t)
	q := venturi.NewQueue(direct, venturi.QueueConfig{})
	viaProxy, proxy := proxiedPool(t, direct)
	defer proxy.Heal() // before the workers stop (cleanups run after this)

	// Hold every gate stripe, so that the cut worker's gated claim waits inside its
	// transaction.
	lock, err := direct.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.venturi_gate'), s)
		FROM generate_series(0, 63) AS s`); err != nil {
		t.Fatal(err)
	}

	st := holdState{started: make(chan int, 4)}
	cfg := fastConfig()
	cfg.Lease = 2 * time.Second
	cut := newWorker(t, viaProxy, st, cfg)
	venturi.MustRegister[slottedHold](cut)
	startWorker(t, cut)
	enqueue(t, q, slottedHold{})
	eventually(t, within, "the cut worker's claim to wait for a gate stripe", func() bool {
		var waiting bool
		err := direct.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting)
		return err == nil && waiting
	})
	proxy.Cut()
	if err := lock.Rollback(ctx); err != nil { // the claim goes on, on the server, and idles
		t.Fatal(err)
	}

	other := newWorker(t, direct, st, cfg)
	venturi.MustRegister[slottedHold](other)
	startWorker(t, other)
	if n := recv(t, st.started, "another worker to run the job while the network is cut"); n != 1 {
		t.Fatalf("run %d, want 1 (the cut claim never ran its job)", n)
	}
}

// txHold completes its first run in a transaction of its own (CompleteTx) and then
// reports, and the test cuts the network before the handler's COMMIT; the next run
// completes plainly.
type txHold struct{}

func (txHold) Kind() string { return "tx-hold" }

type txHoldState struct {
	pool    *pgxpool.Pool // the cut worker's pool: the handler's transaction goes through the proxy
	started chan int      // the run's number
	wroteTx chan struct{} // the first run's CompleteTx returned
	proceed chan struct{} // closed by the test once the network is cut
}

func (txHold) Handle(ctx context.Context, run *venturi.Run[struct{}], s txHoldState) (venturi.Outcome, error) {
	s.started <- run.RunCount()
	if run.RunCount() > 1 {
		return venturi.Completed(), nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	o, err := run.CompleteTx(ctx, tx, venturi.Completed())
	if err != nil {
		return o, err
	}
	s.wroteTx <- struct{}{}
	<-s.proceed
	return o, tx.Commit(ctx) // held by the cut until the run's context ends
}

// TestCompleteTxCutOffBeforeItsCommitDoesNotHoldUpRescue: a handler's own transaction has
// written the run's result (CompleteTx), which locks the job's row, and the network is cut
// (half-open: nothing forwarded, nothing closed) before its COMMIT reaches the server. The
// server session sits idle in the handler's transaction. It must not keep the job's row
// until the network heals, or no other worker can rescue the run once its lease runs out:
// CompleteTx bounds the transaction's idle time from then on, and another worker rescues
// the run and runs the job again before any heal.
func TestCompleteTxCutOffBeforeItsCommitDoesNotHoldUpRescue(t *testing.T) {
	slow(t)
	t.Parallel()
	direct := newDB(t)
	q := venturi.NewQueue(direct, venturi.QueueConfig{})
	viaProxy, proxy := proxiedPool(t, direct)
	defer proxy.Heal() // before the workers stop (cleanups run after this)

	st := txHoldState{pool: viaProxy, started: make(chan int, 4), wroteTx: make(chan struct{}, 1), proceed: make(chan struct{})}
	cfg := fastConfig()
	cfg.Lease = 2 * time.Second
	cut := newWorker(t, viaProxy, st, cfg)
	venturi.MustRegister[txHold](cut)
	startWorker(t, cut)
	r := enqueue(t, q, txHold{})
	if n := recv(t, st.started, "the first run"); n != 1 {
		t.Fatalf("run %d, want 1", n)
	}
	recv(t, st.wroteTx, "the first run's CompleteTx")
	proxy.Cut()
	close(st.proceed)

	other := newWorker(t, direct, st, cfg)
	venturi.MustRegister[txHold](other)
	startWorker(t, other)
	if n := recv(t, st.started, "the run to be rescued and run again while the network is cut"); n != 2 {
		t.Fatalf("run %d, want 2", n)
	}
	j := waitState(t, q, r, venturi.StateCompleted)
	if j.Journal[0].Event != venturi.EventAbandoned {
		t.Fatalf("first run ended %q, want abandoned; journal %+v", j.Journal[0].Event, j.Journal)
	}
}
