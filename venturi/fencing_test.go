package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// createEffects creates the application table a handler writes its effects to, in the
// test's schema.
func createEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(),
		`CREATE TABLE app_effect (job_id text NOT NULL, token bigint NOT NULL, run int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// writeEffect records, in the handler's transaction, that this run applied its effect.
func writeEffect[C any](ctx context.Context, tx pgx.Tx, run *venturi.Run[C]) error {
	_, err := tx.Exec(ctx, `INSERT INTO app_effect (job_id, token, run) VALUES ($1, $2, $3)`,
		run.ID().String(), run.Token(), run.RunCount())
	return err
}

type effect struct {
	token int64
	run   int
}

func effectsOf(t *testing.T, pool *pgxpool.Pool, id ulid.ULID) []effect {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT token, run FROM app_effect WHERE job_id = $1 ORDER BY run`, id.String())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []effect
	for rows.Next() {
		var e effect
		if err := rows.Scan(&e.token, &e.run); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// txApp is the state of txTask's handler.
type txApp struct {
	pool *pgxpool.Pool
	// hold, when set, receives the token of every first run, which then waits for release.
	hold    chan int64
	release chan struct{}
	// firstErr receives what the first run's CompleteTx returned.
	firstErr chan error
}

// txTask writes an effect row and completes in the same transaction. Mode "rollback"
// makes the first run roll its transaction back after CompleteTx and fail.
type txTask struct {
	Mode string `json:"mode"`
}

func (txTask) Kind() string { return "tx" }

func (tt txTask) Handle(ctx context.Context, run *venturi.Run[struct{}], app *txApp) (venturi.Outcome, error) {
	first := run.RunCount() == 1
	if first && app.hold != nil {
		app.hold <- run.Token()
		<-app.release
		// The lease may be gone and ctx cancelled by now; write anyway, as a stalled
		// process waking up would, and let the fence decide.
		ctx = context.WithoutCancel(ctx)
	}
	tx, err := app.pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if err := writeEffect(ctx, tx, run); err != nil {
		return venturi.Outcome{}, err
	}
	o, err := run.CompleteTx(ctx, tx, venturi.CompletedWith(fmt.Sprintf("completed in tx by run %d", run.RunCount())))
	if first && app.firstErr != nil {
		app.firstErr <- err
	}
	if err != nil {
		return venturi.Outcome{}, err
	}
	if first && tt.Mode == "rollback" {
		if err := tx.Rollback(ctx); err != nil {
			return venturi.Outcome{}, err
		}
		return venturi.Outcome{}, errors.New("application rolled back")
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, err
	}
	return o, nil
}

func TestCompleteTxCommitsWithTheApplicationWrite(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	createEffects(t, pool)
	w := startWorkerFor[txTask](t, pool, &txApp{pool: pool}, fastConfig())
	r := enqueue(t, q, txTask{})
	waitState(t, q, r, venturi.StateCompleted)
	stopWorker(t, w) // nothing more may be written for the run
	j := jobByID(t, q, r.ID)
	if eventsOf(j) != "completed" || j.Journal[0].Note != "completed in tx by run 1" || j.Journal[0].Worker != w.ID() {
		t.Fatalf("journal = %+v", j.Journal)
	}
	effects := effectsOf(t, pool, r.ID)
	if len(effects) != 1 || effects[0].run != 1 || effects[0].token != j.Journal[0].Token {
		t.Fatalf("effects %+v, journal token %d", effects, j.Journal[0].Token)
	}
}

func TestCompleteTxRolledBackRetries(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	createEffects(t, pool)
	startWorkerFor[txTask](t, pool, &txApp{pool: pool}, fastConfig())
	r := enqueue(t, q, txTask{Mode: "rollback"})
	j := waitState(t, q, r, venturi.StateCompleted)
	if eventsOf(j) != "failed,completed" || j.Journal[0].Note != "application rolled back" || j.Failures != 1 || j.RunCount != 2 {
		t.Fatalf("journal %+v, failures %d", j.Journal, j.Failures)
	}
	if effects := effectsOf(t, pool, r.ID); len(effects) != 1 || effects[0].run != 2 {
		t.Fatalf("effects %+v, want only run 2's", effects)
	}
}

// forceLeaseLoss makes a running job look like the lease of a dead worker: expired, and
// under a token its worker does not hold.
func forceLeaseLoss(t *testing.T, pool *pgxpool.Pool, id ulid.ULID) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `UPDATE venturi_job
		SET lease_token = lease_token + 1000000000, lease_expires_at = now() - interval '1 hour'
		WHERE id = $1 AND state = 'running'`, id[:])
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("job %s is not running", id)
	}
}

// TestLostLeaseFencesCompleteTx: a run whose job was rescued cannot complete it; its
// CompleteTx returns ErrLeaseLost and its application write rolls back with it.
func TestLostLeaseFencesCompleteTx(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	createEffects(t, pool)
	app := &txApp{pool: pool, hold: make(chan int64, 1), release: make(chan struct{}), firstErr: make(chan error, 1)}
	cfg := fastConfig()
	cfg.Lease = 2 * time.Second
	cfg.Concurrency = 2 // the rescued job runs again while the first run still holds its slot
	w := startWorkerFor[txTask](t, pool, app, cfg)
	r := enqueue(t, q, txTask{})
	firstToken := recv(t, app.hold, "the first run")
	forceLeaseLoss(t, pool, r.ID)

	// Maintenance rescues the job, and a second run completes it.
	j := waitState(t, q, r, venturi.StateCompleted)
	if eventsOf(j) != "abandoned,completed" || j.Failures != 1 || j.RunCount != 2 {
		t.Fatalf("journal %+v, failures %d, runs %d", j.Journal, j.Failures, j.RunCount)
	}
	if a := j.Journal[0]; a.Run != 1 || a.Worker != w.ID() {
		t.Fatalf("abandoned entry = %+v", a)
	}
	if c := j.Journal[1]; c.Run != 2 || c.Note != "completed in tx by run 2" || c.Token == firstToken {
		t.Fatalf("completed entry = %+v (first token %d)", c, firstToken)
	}

	// The first run wakes up and tries to complete: fenced.
	close(app.release)
	if err := recv(t, app.firstErr, "the first run's CompleteTx"); !errors.Is(err, venturi.ErrLeaseLost) {
		t.Fatalf("stale CompleteTx returned %v, want ErrLeaseLost", err)
	}
	stopWorker(t, w) // waits for the first run's handler and its result
	j = jobByID(t, q, r.ID)
	if eventsOf(j) != "abandoned,completed" || j.State != venturi.StateCompleted {
		t.Fatalf("the stale run changed the job: %s %+v", j.State, j.Journal)
	}
	effects := effectsOf(t, pool, r.ID)
	if len(effects) != 1 || effects[0].run != 2 || effects[0].token == firstToken {
		t.Fatalf("effects %+v: the stale run's write must roll back", effects)
	}
}

// TestLostLeaseFencesPlainResults: without CompleteTx, a stale run's returned outcome,
// carry and attachment are discarded too.
func TestLostLeaseFencesPlainResults(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.Lease = 2 * time.Second
	cfg.Concurrency = 2
	app, w, r := startBlockedRun(t, pool, q, cfg)
	forceLeaseLoss(t, pool, r.ID)
	waitState(t, q, r, venturi.StateCompleted)
	close(app.release)
	stopWorker(t, w)
	j := jobByID(t, q, r.ID)
	var c blockCarry
	decodeCarry(t, j, &c)
	if eventsOf(j) != "abandoned,completed" || c.StaleWrite || lastEntry(j).Note != "run 2" {
		t.Fatalf("stale run leaked into the job: journal %+v, carry %s", j.Journal, j.Carry)
	}
}

// blockTask blocks its first run until released (ignoring ctx, like a stalled process),
// then returns a pause with a carry and an attachment that must not land.
type blockTask struct{}

type blockCarry struct {
	StaleWrite bool `json:"stale_write"`
}

type blockApp struct {
	started chan ulid.ULID
	release chan struct{}
}

func (blockTask) Kind() string { return "block" }

// startBlockedRun starts a worker for blockTask with cfg, enqueues one, and returns once
// its first run has started (and blocks until app.release is closed).
func startBlockedRun(t *testing.T, pool *pgxpool.Pool, q *venturi.Queue, cfg venturi.Config) (*blockApp, *venturi.Worker[*blockApp], venturi.Result) {
	t.Helper()
	app := &blockApp{started: make(chan ulid.ULID, 4), release: make(chan struct{})}
	w := startWorkerFor[blockTask](t, pool, app, cfg)
	r := enqueue(t, q, blockTask{})
	recv(t, app.started, "the first run")
	return app, w, r
}

func (blockTask) Handle(ctx context.Context, run *venturi.Run[blockCarry], app *blockApp) (venturi.Outcome, error) {
	if run.RunCount() == 1 {
		app.started <- run.ID()
		<-app.release
		run.CarryMut().StaleWrite = true
		_ = run.SetAttachment("stale")
		return venturi.PauseInWith(0, "stale run 1"), nil
	}
	return venturi.CompletedWith(fmt.Sprintf("run %d", run.RunCount())), nil
}

// TestExpiredLeaseRescuedByAnotherWorker: worker A stalls on a job whose lease then
// expires; worker B's maintenance rescues it (abandoned, one failure) and B completes it.
func TestExpiredLeaseRescuedByAnotherWorker(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	appA := &blockApp{started: make(chan ulid.ULID, 4), release: make(chan struct{})}
	cfgA := fastConfig()
	cfgA.ID = "worker-a"
	cfgA.Concurrency = 1                 // its only slot stays busy with the stalled run
	cfgA.MaintenanceInterval = time.Hour // only B rescues
	// No prefetch buffer: with one, A claims the rescued job into it and keeps it (it
	// releases stale prefetches, then claims them again at once), so B never ran it in
	// about one run in ten, even with the tests run one at a time.
	cfgA.Prefetch = -1
	wa := startWorkerFor[blockTask](t, pool, appA, cfgA)
	r := enqueue(t, q, blockTask{})
	recv(t, appA.started, "worker A's run")

	appB := &blockApp{started: make(chan ulid.ULID, 4), release: make(chan struct{})}
	cfgB := fastConfig()
	cfgB.ID = "worker-b"
	cfgB.Lease = time.Second // the rescue waits for the server to be up one lease
	cfgB.MaxFailures = 5
	startWorkerFor[blockTask](t, pool, appB, cfgB)
	if j := jobByID(t, q, r.ID); j.State != venturi.StateRunning {
		t.Fatalf("job %s before the lease expired", j.State)
	}
	forceLeaseLoss(t, pool, r.ID)

	j := waitState(t, q, r, venturi.StateCompleted)
	if eventsOf(j) != "abandoned,completed" || j.Failures != 1 || j.RunCount != 2 {
		t.Fatalf("journal %+v, failures %d, runs %d", j.Journal, j.Failures, j.RunCount)
	}
	if a := j.Journal[0]; a.Worker != "worker-a" || a.Run != 1 || a.Note == "" || a.StartedAt.IsZero() {
		t.Fatalf("abandoned entry = %+v", a)
	}
	if c := j.Journal[1]; c.Worker != "worker-b" || c.Run != 2 {
		t.Fatalf("completed entry = %+v", c)
	}
	close(appA.release)
	stopWorker(t, wa)
	if j2 := jobByID(t, q, r.ID); eventsOf(j2) != eventsOf(j) || string(j2.Carry) != string(j.Carry) {
		t.Fatalf("worker A's stale result landed: %+v carry %s", j2.Journal, j2.Carry)
	}
}

// TestRescueAtTheBackstopGoesDead: an abandoned run counts as a failure; at the backstop
// (of the worker that claimed it) the rescue sends the job to dead.
func TestRescueAtTheBackstopGoesDead(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.Lease = time.Second
	cfg.MaxFailures = 1
	app, _, r := startBlockedRun(t, pool, q, cfg)
	forceLeaseLoss(t, pool, r.ID)
	j := waitState(t, q, r, venturi.StateDead)
	if eventsOf(j) != "abandoned" || j.Failures != 1 || j.FinishedAt == nil {
		t.Fatalf("journal %+v, failures %d", j.Journal, j.Failures)
	}
	close(app.release)
}
