package venturi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Running a job: what a handler's outcome, carry and attachment become, and how the
// worker survives handlers that panic, overrun or cannot be decoded. Failures and retries
// are in retry_test.go, which jobs are claimed in claim_test.go, registration in
// register_test.go.

// ---- completed note and attachment --------------------------------------------------

type noteTask struct {
	Msg string `json:"msg"`
}

func (noteTask) Kind() string { return "note" }

func (n noteTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if err := run.SetAttachment(map[string]any{"first": true}); err != nil {
		return venturi.Outcome{}, err
	}
	if err := run.SetAttachment(map[string]any{"bytes": len(n.Msg), "msg": n.Msg}); err != nil { // last write wins
		return venturi.Outcome{}, err
	}
	return venturi.CompletedWith("done: " + n.Msg), nil
}

func TestWorkerCompletedNoteAndAttachment(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	w := startWorkerFor[noteTask](t, pool, struct{}{}, fastConfig())
	r := enqueue(t, q, noteTask{Msg: "hello"})
	j := waitState(t, q, r, venturi.StateCompleted)
	if len(j.Journal) != 1 {
		t.Fatalf("journal = %+v", j.Journal)
	}
	e := j.Journal[0]
	var att struct {
		Bytes int    `json:"bytes"`
		Msg   string `json:"msg"`
		First *bool  `json:"first"`
	}
	if err := json.Unmarshal(e.Attachment, &att); err != nil {
		t.Fatalf("attachment %s: %v", e.Attachment, err)
	}
	if e.Event != venturi.EventCompleted || e.Note != "done: hello" || e.Run != 1 || e.Worker != w.ID() || e.Token == 0 ||
		e.StartedAt.IsZero() || e.At.Before(e.StartedAt) || att.Bytes != 5 || att.Msg != "hello" || att.First != nil {
		t.Fatalf("entry = %+v, attachment %s", e, e.Attachment)
	}
	if j.RunCount != 1 || j.Failures != 0 || j.FinishedAt == nil || j.AttemptedAt == nil {
		t.Fatalf("job = %+v", j)
	}
}

// ---- pause loop ------------------------------------------------------------------------

type pauseCarry struct {
	N int `json:"n"`
}

type pauseLoopTask struct {
	Until int `json:"until"`
}

func (pauseLoopTask) Kind() string { return "pause-loop" }

func (p pauseLoopTask) Handle(ctx context.Context, run *venturi.Run[pauseCarry], _ struct{}) (venturi.Outcome, error) {
	if run.Carry().N == p.Until {
		return venturi.CompletedWith(fmt.Sprintf("finished at %d", run.Carry().N)), nil
	}
	run.CarryMut().N++
	return venturi.PauseIn(0), nil
}

func TestPauseLoopNeverTripsTheBackstop(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.MaxFailures = 3
	startWorkerFor[pauseLoopTask](t, pool, struct{}{}, cfg)
	r := enqueue(t, q, pauseLoopTask{Until: 40})
	j := waitFinished(t, q, r.ID)
	if j.State != venturi.StateCompleted {
		t.Fatalf("pause loop ended %s: %+v", j.State, lastEntry(j))
	}
	var c pauseCarry
	decodeCarry(t, j, &c)
	journal := fullJournal(t, q, r.ID)
	if c.N != 40 || j.RunCount != 41 || j.Failures != 0 || len(journal) != 41 || j.JournalLen != 41 {
		t.Fatalf("carry %d, runs %d, failures %d, %d journal entries", c.N, j.RunCount, j.Failures, len(journal))
	}
	for i, e := range journal[:40] {
		if e.Event != venturi.EventPaused || e.Run != i+1 || e.ResumeIn != 0 {
			t.Fatalf("entry %d = %+v", i, e)
		}
	}
	if e := journal[40]; e.Event != venturi.EventCompleted || e.Note != "finished at 40" || e.Run != 41 {
		t.Fatalf("last entry = %+v", e)
	}
}

// ---- panics ------------------------------------------------------------------------------

type panicTask struct{}

func (panicTask) Kind() string { return "panic" }

func (panicTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() == 1 {
		panic("kaboom")
	}
	return venturi.CompletedWith("survived"), nil
}

func TestPanickingHandlerRetriesAndWorkerSurvives(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.Concurrency = 1 // the panicking run and the others share one slot
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[panicTask](w)
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	p := enqueue(t, q, panicTask{})
	j := waitState(t, q, p, venturi.StateCompleted)
	if eventsOf(j) != "failed,completed" || j.Failures != 1 {
		t.Fatalf("journal %s, failures %d", eventsOf(j), j.Failures)
	}
	note := j.Journal[0].Note
	if !strings.HasPrefix(note, "panic: kaboom") || !strings.Contains(note, "goroutine") || !strings.Contains(note, "panicTask") {
		t.Fatalf("panic note lacks the value or the stack: %q", note)
	}
	// The worker goes on running other jobs.
	completeNotes(t, q, 5)
}

// ---- undecodable payload and carry -----------------------------------------------------

type decodeCarryT struct {
	N int `json:"n"`
}

type decodeTask struct {
	Msg string `json:"msg"`
}

func (decodeTask) Kind() string { return "decode" }

func (decodeTask) Handle(ctx context.Context, run *venturi.Run[decodeCarryT], ran chan<- string) (venturi.Outcome, error) {
	ran <- run.ID().String()
	return venturi.Completed(), nil
}

func TestUndecodablePayloadOrCarryGoesDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	ran := make(chan string, 10)
	startWorkerFor[decodeTask](t, pool, (chan<- string)(ran), fastConfig())
	insert := func(payload, carry string) ulid.ULID {
		id := ulid.Make()
		var c any
		if carry != "" {
			c = carry
		}
		if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, carry, run_at)
			VALUES ($1, 'decode', 'available', $2::jsonb, $3::jsonb, now())`, id[:], payload, c); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// The cases share the worker and the check below that the handler never ran: their
	// subtests stay sequential.
	for _, c := range []struct {
		name, payload, carry, note string
	}{
		{"payload of the wrong type", `{"msg": 5}`, "", "decode payload"},
		{"payload that is not an object", `[1, 2]`, "", "decode payload"},
		{"carry of the wrong type", `{"msg": "ok"}`, `"not an object"`, "decode carry"},
		{"carry with a field of the wrong type", `{"msg": "ok"}`, `{"n": "five"}`, "decode carry"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := insert(c.payload, c.carry)
			j := waitJob(t, q, id, "dead", func(j *venturi.Job) bool { return j.State == venturi.StateDead })
			if eventsOf(j) != "dead" || !strings.Contains(j.Journal[0].Note, c.note) || j.RunCount != 1 || j.Failures != 1 {
				t.Fatalf("journal %+v, runs %d, failures %d", j.Journal, j.RunCount, j.Failures)
			}
		})
	}
	select {
	case id := <-ran:
		t.Fatalf("the handler ran for undecodable job %s", id)
	default:
	}
	// A decodable job still runs.
	good := insert(`{"msg": "ok"}`, `{"n": 1}`)
	if got := recv(t, ran, "the decodable job"); got != good.String() {
		t.Fatalf("ran %s, want %s", got, good)
	}
}

// ---- job timeout ---------------------------------------------------------------------

type slowTask struct{}

func (slowTask) Kind() string { return "slow" }

func (slowTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() == 1 {
		<-ctx.Done() // runs past the job timeout
		return venturi.Outcome{}, ctx.Err()
	}
	return venturi.CompletedWith("fast enough"), nil
}

func TestJobTimeoutFailsTheRunAndRetries(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.JobTimeout = 100 * time.Millisecond
	startWorkerFor[slowTask](t, pool, struct{}{}, cfg)
	r := enqueue(t, q, slowTask{})
	j := waitState(t, q, r, venturi.StateCompleted)
	if eventsOf(j) != "failed,completed" || j.Failures != 1 || !strings.Contains(j.Journal[0].Note, "job timeout") {
		t.Fatalf("journal %+v", j.Journal)
	}
}

// ---- unstorable carry -----------------------------------------------------------------

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

// TestUnstorableCarryDoesNotFailACompletedRun: a handler that completes with a carry
// jsonb cannot store completes: the carry is not persisted when a job completes or dies
// (Run.CarryMut), so it is not encoded for a Completed outcome, and the run is not
// recorded as failed, re-run and ended dead for a carry that would never be read again.
func TestUnstorableCarryDoesNotFailACompletedRun(t *testing.T) {
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

// TestCompleteTxWithAnUnstorableCarryWritesTheOutcomeAsked: CompleteTx(Completed) with a
// carry jsonb cannot store either completes the job or returns an error; it never writes
// another outcome (a failure that re-runs the job) inside the handler's transaction while
// returning nil, which would apply the handler's committed effects twice.
func TestCompleteTxWithAnUnstorableCarryWritesTheOutcomeAsked(t *testing.T) {
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

// ---- zero-delay pauses and retries ------------------------------------------------------

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

// TestPauseZeroAndImmediateRetryDoNotWaitForThePoll: a run that returns its job to
// available (PauseIn(0), or a retry whose backoff is zero, as the first two are) wakes
// the worker, so an otherwise idle worker runs the job again at once and not at its next
// poll (an hour here).
func TestPauseZeroAndImmediateRetryDoNotWaitForThePoll(t *testing.T) {
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
