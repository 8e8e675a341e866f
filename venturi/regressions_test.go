// Regression tests for library bugs found while writing the integration suite: a carry
// that cannot be stored failing a completed run, CompleteTx writing another outcome than
// asked, a stale run untracking its successor, a partial EnqueueManyTx, and zero-delay
// pauses and retries waiting for the poll interval. All are fixed; these keep them fixed.
package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// unstorableCarry holds text with a NUL character, which jsonb cannot store.
type unstorableCarry struct {
	Raw string `json:"raw"`
}

// completeWithBadCarryTask puts unstorable text in its carry and completes, directly or
// through CompleteTx.
type completeWithBadCarryTask struct {
	UseTx bool `json:"use_tx"`
}

func (completeWithBadCarryTask) Kind() string { return "bad-carry-complete" }

type badCarryApp struct {
	pool       *pgxpool.Pool
	completeTx chan error
}

func (c completeWithBadCarryTask) Handle(ctx context.Context, run *venturi.Run[unstorableCarry], app *badCarryApp) (venturi.Outcome, error) {
	run.CarryMut().Raw = "scraped bytes \x00 with a NUL"
	if !c.UseTx {
		return venturi.CompletedWith("all done"), nil
	}
	tx, err := app.pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := writeEffect(ctx, tx, run); err != nil {
		return venturi.Outcome{}, err
	}
	o, err := run.CompleteTx(ctx, tx, venturi.CompletedWith("all done in tx"))
	if run.RunCount() == 1 {
		app.completeTx <- err
	}
	if err != nil {
		return venturi.Outcome{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, err
	}
	return o, nil
}

// Regression (fixed): worker.go runTask/build encodes the carry for every outcome, including Completed,
// and turns an encoding failure into a retryable failure ("encode carry: ..."). A run
// that completed its work is recorded as failed and re-runs (and, with the backstop, ends
// dead) only because of a carry that would never be read again. Run.CarryMut documents
// that the carry is not persisted when the job completes or dies.
// Fix: in build, skip encoding (setCarry=false) when the outcome is Completed or the error
// is permanent; only a Pause or a retryable failure needs the carry.
func TestRegressionUnstorableCarryTurnsCompletionIntoFailure(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.MaxFailures = 3
	startWorkerFor[completeWithBadCarryTask](t, pool, &badCarryApp{pool: pool}, cfg)
	r := enqueue(t, q, completeWithBadCarryTask{})
	j := waitFinished(t, q, r.ID)
	if j.State != venturi.StateCompleted || eventsOf(j) != "completed" || j.Journal[0].Note != "all done" {
		t.Fatalf("a handler that returned Completed ended %s after %d runs; journal %s: %+v",
			j.State, j.RunCount, eventsOf(j), j.Journal)
	}
}

// Regression (fixed): worker.go runTask, run.finish: CompleteTx builds its result with the same build
// function, so an unstorable carry turns the Completed outcome into a *failed* result that
// is written inside the handler's transaction, and CompleteTx still returns nil. The
// handler commits its application writes believing the job completed, but the job is
// rescheduled and runs again: the effects are applied twice, which is exactly what
// transactional completion promises to prevent.
// Fix: as above, do not encode the carry for a Completed outcome; and if a requested
// outcome cannot be written as requested, CompleteTx must return an error instead of
// silently writing another outcome.
func TestRegressionCompleteTxWithUnstorableCarryRecordsFailure(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	createEffects(t, pool)
	app := &badCarryApp{pool: pool, completeTx: make(chan error, 1)}
	cfg := fastConfig()
	cfg.MaxFailures = 2
	startWorkerFor[completeWithBadCarryTask](t, pool, app, cfg)
	r := enqueue(t, q, completeWithBadCarryTask{UseTx: true})
	txErr := recv(t, app.completeTx, "the first run's CompleteTx")
	j := waitFinished(t, q, r.ID)
	effects := effectsOf(t, pool, r.ID)
	if txErr == nil && (j.State != venturi.StateCompleted || len(effects) != 1) {
		t.Fatalf("CompleteTx(Completed) returned nil and the handler committed, yet the job ended %s with journal %s (%+v) and %d committed effects",
			j.State, eventsOf(j), j.Journal, len(effects))
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

// Regression (fixed): worker.go tracks running jobs in w.active keyed by job ID only. When a stalled run
// loses its lease, the job is rescued and the SAME worker claims it again, claim()
// overwrites w.active[id] with the new run. When the stale run finally returns, its
// cleanup (startHandler: w.untrack(j.id) for a lost run, or the finisher's untrack after
// the fenced write) deletes the NEW run's entry. From then on the lease loop no longer
// extends the healthy new run's lease, so it expires and the job is rescued again
// (a second "abandoned" entry and failure) while the new run is still working; its result
// is then discarded and the job runs a third time.
// Fix: key w.active by (job ID, token) — or make untrack(id, token) delete only when the
// stored run's token matches — and likewise in finisher.expired and releaseStuck.
func TestRegressionStaleRunUntracksTheNewRunOfTheSameJob(t *testing.T) {
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

// Regression (fixed): queue.go EnqueueManyTx inserts the plain tasks first and only then runs the keyed
// ones; a keyed task refused with ErrIsolation (or any merge error) returns an error after
// the plain tasks were written into the caller's transaction. The package documents these
// refusals as writing nothing; a caller that logs the error and commits gets a partial
// batch.
// Fix: validate everything that can be validated (isolation level included: one
// `SELECT current_setting('transaction_isolation')` when any task has a key) before the
// first insert, or run the batch under a SAVEPOINT and roll back to it on error.
func TestRegressionEnqueueManyTxRefusalLeavesPlainTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.EnqueueManyTx(ctx, tx, []venturi.Task{plainTask{N: 1}, keyedTask{Key: "k"}})
	if !errors.Is(err, venturi.ErrIsolation) {
		t.Fatalf("EnqueueManyTx: %v, want ErrIsolation", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countJobs(t, pool, "true"); n != 0 {
		t.Fatalf("a refused EnqueueManyTx left %d rows in the caller's transaction", n)
	}
}

// yieldTask yields once with PauseIn(0), fails once with a retryable error (whose first
// retry has zero backoff), then completes.
type yieldTask struct{}

func (yieldTask) Kind() string { return "yield" }

func (yieldTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	switch run.RunCount() {
	case 1:
		return venturi.PauseIn(0), nil
	case 2:
		return venturi.Outcome{}, errors.New("first failure: the retry is immediate")
	}
	return venturi.Completed(), nil
}

// Regression (fixed): worker.go/finisher.go: a run that returns its job to available (PauseIn(0), or a
// retry whose backoff is zero — the first two retries by design) neither NOTIFYs nor pokes
// the worker's own fetch loop. An otherwise idle worker only finds the job at its next
// poll, so "PauseIn(0) yields at once" and "the first two retries are immediate" really
// mean "after up to Config.PollInterval" (1s by default; here 1h, so the job never runs).
// Fix: after a finish batch commits, call w.poke() if any result went to available (and
// arm a timer for the earliest short scheduled delay), or queue a pg_notify for those
// kinds in the FinishRuns batch.
func TestRegressionPauseZeroWaitsForThePollInterval(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.PollInterval = time.Hour // NOTIFY wakes the worker for the enqueue
	startWorkerFor[yieldTask](t, pool, struct{}{}, cfg)
	r := enqueue(t, q, yieldTask{})
	j := waitJob(t, q, r.ID, "the available job to run again (the idle worker was not woken)", func(j *venturi.Job) bool {
		return j.State == venturi.StateCompleted
	})
	if eventsOf(j) != "paused,failed,completed" {
		t.Fatalf("journal %s", eventsOf(j))
	}
}

// pauseWithBadCarryTask pauses with a carry that jsonb refuses (a NUL), after checking
// that Checkpoint refuses it too.
type pauseWithBadCarryTask struct{}

func (pauseWithBadCarryTask) Kind() string { return "bad-carry-pause" }

func (pauseWithBadCarryTask) Handle(ctx context.Context, run *venturi.Run[unstorableCarry], errs chan error) (venturi.Outcome, error) {
	run.CarryMut().Raw = "scraped bytes \x00 with a NUL"
	errs <- run.Checkpoint(ctx)
	return venturi.PauseIn(time.Hour), nil
}

// TestUnstorableCarryIsNamedAsTheCarry: a carry that cannot be stored fails the run with a
// note that names the carry (not the payload), and Checkpoint returns ErrInvalidCarry.
func TestUnstorableCarryIsNamedAsTheCarry(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	errs := make(chan error, 4)
	cfg := fastConfig()
	cfg.MaxFailures = 2
	startWorkerFor[pauseWithBadCarryTask](t, pool, errs, cfg)
	r := enqueue(t, q, pauseWithBadCarryTask{})
	if err := recv(t, errs, "the run's Checkpoint"); !errors.Is(err, venturi.ErrInvalidCarry) {
		t.Fatalf("Checkpoint of a carry with a NUL: %v, want ErrInvalidCarry", err)
	}
	j := waitFinished(t, q, r.ID) // dead at the second failure
	note := j.Journal[0].Note
	if j.Journal[0].Event != venturi.EventFailed || !strings.HasPrefix(note, "venturi: carry cannot be stored: ") ||
		strings.Contains(note, "payload") {
		t.Fatalf("run ended %s noted %q; want a failure naming the carry", j.Journal[0].Event, note)
	}
}
