package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// finishBlocked completes at once; the test holds its result's write inside the database.
type finishBlocked struct{}

func (finishBlocked) Kind() string { return "finish-blocked" }

func (finishBlocked) Handle(context.Context, *venturi.Run[struct{}], longRunState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// longRun runs until its context ends and reports why.
type longRun struct{}

func (longRun) Kind() string { return "long-run" }

type longRunState struct {
	started chan struct{}
	ended   chan error
}

func (longRun) Handle(ctx context.Context, _ *venturi.Run[struct{}], s longRunState) (venturi.Outcome, error) {
	s.started <- struct{}{}
	<-ctx.Done()
	s.ended <- context.Cause(ctx)
	return venturi.Outcome{}, context.Cause(ctx)
}

// TestLeaseExtensionDoesNotWaitForAResultBeingWritten: while the statement writing one
// run's result waits inside the database (here: a trigger the test holds), the worker's
// other runs keep their leases. The lease extension used to include the run being written
// and wait for its row; since the two statements lock rows in different orders they also
// deadlocked, and PostgreSQL broke it only after deadlock_timeout: with a short lease the
// extension's whole budget, so a healthy worker's runs were rescued as abandoned (chaos,
// failover-sync mode, under load).
func TestLeaseExtensionDoesNotWaitForAResultBeingWritten(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION hold_finish() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_advisory_xact_lock_shared(hashtext(current_schema() || '.hold'));
			RETURN COALESCE(NEW, OLD);
		END $$;
		-- The finish ends the job in place (no history partition yet) or moves it to the
		-- history (a DELETE): either waits.
		CREATE TRIGGER hold_finish BEFORE UPDATE ON venturi_job FOR EACH ROW
		WHEN (NEW.kind = 'finish-blocked' AND NEW.state = 'completed') EXECUTE FUNCTION hold_finish();
		CREATE TRIGGER hold_finish_moved BEFORE DELETE ON venturi_job FOR EACH ROW
		WHEN (OLD.kind = 'finish-blocked') EXECUTE FUNCTION hold_finish();`); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(hashtext(current_schema() || '.hold'))`); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_, _ = holder.Exec(ctx, `SELECT pg_advisory_unlock(hashtext(current_schema() || '.hold'))`)
		}
	}
	defer release()

	st := longRunState{started: make(chan struct{}, 1), ended: make(chan error, 1)}
	cfg := fastConfig()
	cfg.Lease = time.Second // extended every 333ms, each extension given 500ms
	w := newWorker(t, pool, st, cfg)
	venturi.MustRegister[longRun](w)
	venturi.MustRegister[finishBlocked](w)
	startWorker(t, w)
	long := enqueue(t, q, longRun{})
	recv(t, st.started, "the long run to start")
	blocked := enqueue(t, q, finishBlocked{})
	eventually(t, within, "the blocked run's result to wait in the database", func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting)
		return err == nil && waiting
	})
	var from time.Time
	if err := pool.QueryRow(ctx, `SELECT lease_expires_at FROM venturi_job WHERE id = $1`, long.ID[:]).Scan(&from); err != nil {
		t.Fatal(err)
	}
	// Three leases' worth of extensions while the write waits: the long run's lease keeps
	// moving, and its handler is not cancelled.
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var until time.Time
		if err := pool.QueryRow(ctx, `SELECT lease_expires_at FROM venturi_job WHERE id = $1`, long.ID[:]).Scan(&until); err != nil {
			t.Fatal(err)
		}
		if until.Sub(from) >= 3*cfg.Lease {
			break
		}
		select {
		case err := <-st.ended:
			t.Fatalf("the long run ended while another run's result was being written: %v (lease lost: %v)", err, errors.Is(err, venturi.ErrLeaseLost))
		case <-deadline.C:
			t.Fatalf("the long run's lease did not move for %v while another run's result was being written", within)
		case <-tick.C:
		}
	}
	release()
	waitState(t, q, blocked, venturi.StateCompleted)
	select {
	case err := <-st.ended:
		t.Fatalf("the long run ended: %v", err)
	default:
	}
}

// stallTask's first run stalls (ignoring ctx) until released; its second run blocks
// until released too; later runs complete at once.
type stallTask struct{}

type stallApp struct {
	started  chan int
	release1 chan struct{}
	release2 chan struct{}
}

func (stallTask) Kind() string { return "stall" }

func (stallTask) Handle(ctx context.Context, run *venturi.Run[struct{}], app *stallApp) (venturi.Outcome, error) {
	app.started <- run.RunCount()
	switch run.RunCount() {
	case 1:
		<-app.release1
		return venturi.CompletedWith("stale run 1"), nil
	case 2:
		<-app.release2
		return venturi.CompletedWith("run 2"), nil
	}
	return venturi.CompletedWith(fmt.Sprintf("run %d", run.RunCount())), nil
}

// TestStaleRunDoesNotUntrackTheNewRunOfTheSameJob: a run that lost its lease and returns
// after the same worker claimed the job again leaves the new run tracked (the worker's
// running jobs are keyed by job and lease token), so the lease loop keeps extending the
// new run's lease: it is not rescued while it works, and the job does not run a third time.
func TestStaleRunDoesNotUntrackTheNewRunOfTheSameJob(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	app := &stallApp{started: make(chan int, 4), release1: make(chan struct{}), release2: make(chan struct{})}
	cfg := fastConfig()
	cfg.Lease = 2 * time.Second
	cfg.Concurrency = 2
	startWorkerFor[stallTask](t, pool, app, cfg)
	t.Cleanup(func() { close(app.release2) }) // before the worker stops
	r := enqueue(t, q, stallTask{})
	if n := recv(t, app.started, "run 1"); n != 1 {
		t.Fatalf("started run %d", n)
	}
	forceLeaseLoss(t, pool, r.ID)
	if n := recv(t, app.started, "run 2 on the same worker"); n != 2 {
		t.Fatalf("started run %d", n)
	}
	close(app.release1) // the stale run returns while run 2 is healthy and running
	// Run 2 must keep its lease for as long as it runs: wait until it has held the job for
	// three lease periods.
	eventually(t, within, "run 2 to hold its lease for three lease periods", func() bool {
		var ok bool
		var entries int
		if err := pool.QueryRow(ctx, `SELECT state = 'running' AND runs = 2 AND lease_expires_at > now()
				AND now() - attempted_at > interval '6 seconds', jsonb_array_length(journal)
			FROM venturi_job WHERE id = $1`, r.ID[:]).Scan(&ok, &entries); err != nil {
			t.Fatal(err)
		}
		if entries > 1 {
			j := jobByID(t, q, r.ID)
			t.Fatalf("the healthy run 2 lost its lease after the stale run 1 returned: journal %s %+v", eventsOf(j), j.Journal)
		}
		return ok
	})
}
