package venturi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

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
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	r, err := q.Enqueue(ctx, noteTask{Msg: "hello"})
	if err != nil {
		t.Fatal(err)
	}
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
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	cfg := fastConfig()
	cfg.MaxFailures = 3
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[pauseLoopTask](w)
	startWorker(t, w)
	r, err := q.Enqueue(ctx, pauseLoopTask{Until: 40})
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, q, r.ID, "completed or dead", func(j *venturi.Job) bool {
		return j.State == venturi.StateCompleted || j.State == venturi.StateDead
	})
	if j.State != venturi.StateCompleted {
		t.Fatalf("pause loop ended %s: %+v", j.State, lastEntry(j))
	}
	var c pauseCarry
	decodeCarry(t, j, &c)
	if c.N != 40 || j.RunCount != 41 || j.Failures != 0 || len(j.Journal) != 41 {
		t.Fatalf("carry %d, runs %d, failures %d, %d journal entries", c.N, j.RunCount, j.Failures, len(j.Journal))
	}
	for i, e := range j.Journal[:40] {
		if e.Event != venturi.EventPaused || e.Run != i+1 || e.ResumeIn != 0 {
			t.Fatalf("entry %d = %+v", i, e)
		}
	}
	if e := j.Journal[40]; e.Event != venturi.EventCompleted || e.Note != "finished at 40" || e.Run != 41 {
		t.Fatalf("last entry = %+v", e)
	}
}

// ---- failures, backstop, history and carry --------------------------------------------

type failCarry struct {
	Attempts int `json:"attempts"`
}

// failTask fails its first FailRuns runs (permanently if Permanent), then completes. Each
// run records what it saw.
type failTask struct {
	FailRuns  int  `json:"fail_runs"`
	Permanent bool `json:"permanent"`
}

func (failTask) Kind() string { return "fail" }

type failApp struct {
	mu   sync.Mutex
	runs []failObs
}

type failObs struct {
	run, failures, history, attempts int
	shutdown                         bool
	kind                             string
	id                               ulid.ULID
}

func (f failTask) Handle(ctx context.Context, run *venturi.Run[failCarry], app *failApp) (venturi.Outcome, error) {
	app.mu.Lock()
	app.runs = append(app.runs, failObs{run: run.RunCount(), failures: run.Failures(), history: len(run.History()),
		attempts: run.Carry().Attempts, shutdown: run.ShuttingDown(), kind: run.Kind(), id: run.ID()})
	app.mu.Unlock()
	if venturi.Failures(run.History()) != run.Failures() {
		return venturi.Outcome{}, venturi.Permanentf("Failures(history) = %d but run.Failures() = %d",
			venturi.Failures(run.History()), run.Failures())
	}
	run.CarryMut().Attempts++
	if err := run.SetAttachment(map[string]int{"run": run.RunCount()}); err != nil {
		return venturi.Outcome{}, err
	}
	if run.RunCount() <= f.FailRuns {
		err := fmt.Errorf("transient failure %d", run.RunCount())
		if f.Permanent {
			return venturi.Outcome{}, venturi.Permanent(err)
		}
		return venturi.Outcome{}, err
	}
	return venturi.CompletedWith(fmt.Sprintf("completed after %d attempts", run.Carry().Attempts)), nil
}

func (a *failApp) observed() []failObs {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]failObs(nil), a.runs...)
}

func runFailTask(t *testing.T, cfg venturi.Config, task failTask, final venturi.State) (*venturi.Job, []failObs) {
	t.Helper()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	app := &failApp{}
	w := newWorker(t, pool, app, cfg)
	venturi.MustRegister[failTask](w)
	startWorker(t, w)
	r, err := q.Enqueue(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, q, r.ID, "finished", func(j *venturi.Job) bool {
		return j.State == venturi.StateCompleted || j.State == venturi.StateDead
	})
	if j.State != final {
		t.Fatalf("job ended %s, want %s; journal %+v", j.State, final, j.Journal)
	}
	stopWorker(t, w)
	obs := app.observed()
	for i, o := range obs {
		if o.run != i+1 || o.history != i || o.failures != i || o.attempts != i || o.shutdown || o.kind != "fail" || o.id != r.ID {
			t.Errorf("run %d observed %+v: want run %d with %d history entries, %d failures and carry %d", i+1, o, i+1, i, i, i)
		}
	}
	for i, e := range j.Journal {
		var att struct{ Run int }
		if err := json.Unmarshal(e.Attachment, &att); err != nil || att.Run != i+1 || e.Run != i+1 || e.Worker != w.ID() {
			t.Errorf("entry %d = %+v (attachment %s): want run %d with its attachment", i, e, e.Attachment, i+1)
		}
	}
	return j, obs
}

func TestPermanentErrorGoesStraightToDead(t *testing.T) {
	cfg := fastConfig()
	j, obs := runFailTask(t, cfg, failTask{FailRuns: 100, Permanent: true}, venturi.StateDead)
	if len(obs) != 1 || j.RunCount != 1 || j.Failures != 1 || eventsOf(j) != "dead" || j.Journal[0].Note != "transient failure 1" ||
		j.FinishedAt == nil {
		t.Fatalf("runs %d, failures %d, journal %+v", j.RunCount, j.Failures, j.Journal)
	}
}

func TestRetryableErrorsHitTheBackstop(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxFailures = 3
	j, obs := runFailTask(t, cfg, failTask{FailRuns: 100}, venturi.StateDead)
	if len(obs) != 3 || j.RunCount != 3 || j.Failures != 3 || eventsOf(j) != "failed,failed,dead" {
		t.Fatalf("%d runs observed, job runs %d, failures %d, journal %s", len(obs), j.RunCount, j.Failures, eventsOf(j))
	}
	if n := j.Journal[2].Note; !strings.Contains(n, "backstop") || !strings.Contains(n, "transient failure 3") {
		t.Fatalf("dead note = %q", n)
	}
	for i, e := range j.Journal[:2] {
		if e.Note != fmt.Sprintf("transient failure %d", i+1) {
			t.Fatalf("failed entry %d note = %q", i, e.Note)
		}
	}
	// Carry persisted on each retry: the dead job keeps the last stored one.
	var c failCarry
	decodeCarry(t, j, &c)
	if c.Attempts < 2 {
		t.Fatalf("carry after two retries = %+v", c)
	}
}

func TestBackstopDisabledRetriesUntilSuccess(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxFailures = -1
	j, obs := runFailTask(t, cfg, failTask{FailRuns: 6}, venturi.StateCompleted)
	if len(obs) != 7 || j.RunCount != 7 || j.Failures != 6 || eventsOf(j) != "failed,failed,failed,failed,failed,failed,completed" {
		t.Fatalf("%d runs observed, job runs %d, failures %d, journal %s", len(obs), j.RunCount, j.Failures, eventsOf(j))
	}
	if n := lastEntry(j).Note; n != "completed after 7 attempts" {
		t.Fatalf("completion note = %q: the carry was not persisted across retries", n)
	}
}

// TestRetryScheduleFollowsBackoff: the failed entries record the documented Fibonacci
// delays, with no jitter when it is disabled and with the reproducible jitter otherwise.
func TestRetryScheduleFollowsBackoff(t *testing.T) {
	for _, jitter := range []float64{-1, 0.5} {
		t.Run(fmt.Sprint("jitter ", jitter), func(t *testing.T) {
			cfg := fastConfig()
			cfg.MaxFailures = -1
			cfg.JitterFraction = jitter
			cfg.Backoff = venturi.Backoff{Base: time.Millisecond, Cap: time.Hour}
			j, _ := runFailTask(t, cfg, failTask{FailRuns: 5}, venturi.StateCompleted)
			for i, e := range j.Journal[:5] {
				n := i + 1
				want := cfg.Backoff.Delay(n)
				if jitter > 0 {
					want = venturi.Jitter(want, jitter, j.ID, n)
				}
				if e.Event != venturi.EventFailed || e.ResumeIn != want {
					t.Errorf("failure %d: resume_in %v, want %v", n, e.ResumeIn, want)
				}
			}
		})
	}
}

// ---- per-task backoff override ----------------------------------------------------------

type slowBackoffTask struct{}

func (slowBackoffTask) Kind() string { return "slow-backoff" }

func (slowBackoffTask) Backoff() venturi.Backoff { return venturi.Backoff{Base: 3 * time.Millisecond} }

func (slowBackoffTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() <= 4 {
		return venturi.Outcome{}, errors.New("again")
	}
	return venturi.Completed(), nil
}

func TestTaskBackoffOverridesWorkerDefault(t *testing.T) {
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	cfg := fastConfig()
	cfg.JitterFraction = -1
	cfg.Backoff = venturi.Backoff{Base: time.Millisecond, Cap: 7 * time.Millisecond}
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[slowBackoffTask](w)
	startWorker(t, w)
	r, err := q.Enqueue(context.Background(), slowBackoffTask{})
	if err != nil {
		t.Fatal(err)
	}
	j := waitState(t, q, r, venturi.StateCompleted)
	// The task's 3ms base with the worker's 7ms cap: 0, 0, 3ms, 6ms.
	want := []time.Duration{0, 0, 3 * time.Millisecond, 6 * time.Millisecond}
	for i, d := range want {
		if j.Journal[i].ResumeIn != d {
			t.Errorf("failure %d: resume_in %v, want %v", i+1, j.Journal[i].ResumeIn, d)
		}
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
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	cfg := fastConfig()
	cfg.Concurrency = 1 // the panicking run and the others share one slot
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[panicTask](w)
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	p, err := q.Enqueue(ctx, panicTask{})
	if err != nil {
		t.Fatal(err)
	}
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
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	ran := make(chan string, 10)
	w := newWorker(t, pool, (chan<- string)(ran), fastConfig())
	venturi.MustRegister[decodeTask](w)
	startWorker(t, w)
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

// ---- unknown kinds and disjoint registries -------------------------------------------

type orphanTask struct{}

func (orphanTask) Kind() string               { return "nobody-handles-this" }
func (orphanTask) Priority() venturi.Priority { return venturi.PriorityMax }

func TestUnknownKindIsNeverClaimed(t *testing.T) {
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	orphan, err := q.Enqueue(ctx, orphanTask{})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	completeNotes(t, q, 10)
	j := jobByID(t, q, orphan.ID)
	if j.State != venturi.StateAvailable || j.RunCount != 0 || len(j.Journal) != 0 || j.AttemptedAt != nil {
		t.Fatalf("job of an unregistered kind was touched: %+v", j)
	}
}

type kindATask struct{ N int }

func (kindATask) Kind() string { return "kind-a" }
func (kindATask) Handle(ctx context.Context, run *venturi.Run[struct{}], who string) (venturi.Outcome, error) {
	return venturi.CompletedWith(who), nil
}

type kindBTask struct{ N int }

func (kindBTask) Kind() string { return "kind-b" }
func (kindBTask) Handle(ctx context.Context, run *venturi.Run[struct{}], who string) (venturi.Outcome, error) {
	return venturi.CompletedWith(who), nil
}

func TestDisjointWorkersClaimOnlyTheirKinds(t *testing.T) {
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	wa := newWorker(t, pool, "a", fastConfig())
	venturi.MustRegister[kindATask](wa)
	wb := newWorker(t, pool, "b", fastConfig())
	venturi.MustRegister[kindBTask](wb)
	if wa.ID() == wb.ID() || wa.ID() == "" {
		t.Fatalf("worker IDs %q and %q", wa.ID(), wb.ID())
	}
	startWorker(t, wa)
	startWorker(t, wb)
	var tasks []venturi.Task
	for i := 0; i < 15; i++ {
		tasks = append(tasks, kindATask{N: i}, kindBTask{N: i})
	}
	res, err := q.EnqueueMany(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		j := waitState(t, q, r, venturi.StateCompleted)
		wantWorker, wantNote := wa.ID(), "a"
		if tasks[i].Kind() == "kind-b" {
			wantWorker, wantNote = wb.ID(), "b"
		}
		if len(j.Journal) != 1 || j.Journal[0].Worker != wantWorker || j.Journal[0].Note != wantNote {
			t.Fatalf("%s job ran on %q with note %q, want worker %q", j.Kind, j.Journal[0].Worker, j.Journal[0].Note, wantWorker)
		}
	}
}

// ---- priority ---------------------------------------------------------------------------

type prioTask struct {
	Name string
	P    venturi.Priority
}

func (prioTask) Kind() string                 { return "prio" }
func (p prioTask) Priority() venturi.Priority { return p.P }
func (p prioTask) Handle(ctx context.Context, run *venturi.Run[struct{}], order chan<- string) (venturi.Outcome, error) {
	order <- p.Name
	return venturi.Completed(), nil
}

func TestClaimOrderFollowsPriorityThenDueTime(t *testing.T) {
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	base := time.Now().Add(-time.Hour)
	for i, p := range []prioTask{
		{"normal-late", venturi.PriorityNormal}, {"low", venturi.PriorityLow}, {"critical", venturi.PriorityCritical},
		{"clamped", 30000}, {"high", venturi.PriorityHigh}, {"min", -30000},
	} {
		at := base.Add(time.Duration(10-i) * time.Minute)
		if _, err := q.Enqueue(ctx, p, venturi.At(at)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Enqueue(ctx, prioTask{"normal-early", venturi.PriorityNormal}, venturi.At(base)); err != nil {
		t.Fatal(err)
	}
	if n := countJobs(t, pool, "priority = $1", int16(venturi.PriorityMax)); n != 1 {
		t.Fatalf("priority 30000 not clamped to PriorityMax")
	}
	order := make(chan string, 10)
	cfg := fastConfig()
	cfg.Concurrency = 1
	w := newWorker(t, pool, (chan<- string)(order), cfg)
	venturi.MustRegister[prioTask](w)
	startWorker(t, w)
	var got []string
	for range 7 {
		got = append(got, recv(t, order, "the next job"))
	}
	want := "clamped,critical,high,normal-early,normal-late,low,min"
	if strings.Join(got, ",") != want {
		t.Fatalf("ran %v, want %s", got, want)
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
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	cfg := fastConfig()
	cfg.JobTimeout = 100 * time.Millisecond
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[slowTask](w)
	startWorker(t, w)
	r, err := q.Enqueue(context.Background(), slowTask{})
	if err != nil {
		t.Fatal(err)
	}
	j := waitState(t, q, r, venturi.StateCompleted)
	if eventsOf(j) != "failed,completed" || j.Failures != 1 || !strings.Contains(j.Journal[0].Note, "job timeout") {
		t.Fatalf("journal %+v", j.Journal)
	}
}

// ---- registration ------------------------------------------------------------------------

// mismatchTask's Merge sees an int carry but its handler keeps a string.
type mismatchTask struct{}

func (mismatchTask) Kind() string { return "mismatch" }
func (mismatchTask) Merge(existing venturi.Pending[mismatchTask, int]) venturi.Merge[mismatchTask, int] {
	return existing.Keep()
}
func (mismatchTask) Handle(ctx context.Context, run *venturi.Run[string], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// badMergeTask has a Merge method of the wrong shape.
type badMergeTask struct{}

func (badMergeTask) Kind() string                  { return "bad-merge" }
func (badMergeTask) Merge(other badMergeTask) bool { return true }
func (badMergeTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

type emptyKindHandler struct{}

func (emptyKindHandler) Kind() string { return "" }
func (emptyKindHandler) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

type otherNoteTask struct{}

func (otherNoteTask) Kind() string { return "note" } // the same kind as noteTask
func (otherNoteTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

func TestRegisterRejectsInvalidTaskTypes(t *testing.T) {
	pool := newDB(t)
	w := newWorker(t, pool, struct{}{}, fastConfig())
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("Start with no registered task types succeeded")
	}
	if err := venturi.Register[mismatchTask](w); err == nil || !strings.Contains(err.Error(), "carry") {
		t.Errorf("merge carry int vs handler carry string: %v", err)
	}
	if err := venturi.Register[badMergeTask](w); err == nil || !strings.Contains(err.Error(), "Merge") {
		t.Errorf("malformed Merge method: %v", err)
	}
	if err := venturi.Register[emptyKindHandler](w); !errors.Is(err, venturi.ErrEmptyKind) {
		t.Errorf("empty kind: %v", err)
	}
	if err := venturi.Register[noteTask](w); err != nil {
		t.Fatal(err)
	}
	if err := venturi.Register[otherNoteTask](w); err == nil {
		t.Error("a kind registered twice was accepted")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Register of a duplicate kind did not panic")
			}
		}()
		venturi.MustRegister[otherNoteTask](w)
	}()
	startWorker(t, w)
	if err := w.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	if err := venturi.Register[panicTask](w); err == nil {
		t.Error("Register after Start succeeded")
	}
	// A malformed merge is refused at enqueue too, and writes nothing.
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	if _, err := q.Enqueue(context.Background(), keyedBadMergeTask{}); err != nil {
		t.Fatal(err) // no collision yet: the merge method is not needed
	}
	if _, err := q.Enqueue(context.Background(), keyedBadMergeTask{}); err == nil || !strings.Contains(err.Error(), "Merge") {
		t.Fatalf("collision with a malformed Merge: %v", err)
	}
	if n := countJobs(t, pool, "kind = 'keyed-bad-merge'"); n != 1 {
		t.Fatalf("%d rows", n)
	}
}

type keyedBadMergeTask struct{}

func (keyedBadMergeTask) Kind() string               { return "keyed-bad-merge" }
func (keyedBadMergeTask) DedupKey() venturi.DedupKey { return "x" }
func (keyedBadMergeTask) Merge() string              { return "keep" }
