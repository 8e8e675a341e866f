package venturi_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestExplainNewJobChangesNothing: Explain of a task that meets no pending job reports an
// insert with the drawn ID, its due time and its retry schedule, and writes nothing,
// calls no enqueue middleware and publishes no event.
func TestExplainNewJobChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	called := false
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{
		func(ctx context.Context, info *venturi.EnqueueInfo, next func(context.Context) (venturi.Result, error)) (venturi.Result, error) {
			called = true
			return next(ctx)
		}}})
	sub := q.Subscribe(venturi.SubscribeConfig{Buffer: 10})
	defer sub.Close()
	ex, err := q.Explain(ctx, opsTask{N: 1, Q: "media"}, venturi.After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if ex.Action != venturi.ActionInserted || ex.Kind != "ops" || ex.Queue != "media" || ex.Pending != nil || ex.Job == nil ||
		ex.Job.State != venturi.StateScheduled || !ex.Due.Equal(ex.Job.RunAt) || time.Until(ex.Due) < 50*time.Minute {
		t.Fatalf("explanation %+v", ex)
	}
	if !strings.Contains(ex.Notes[0], ex.Job.ID.String()) || !strings.HasPrefix(ex.Notes[1], "due in") {
		t.Fatalf("notes %q", ex.Notes)
	}
	b := opsTask{}.Backoff()
	if len(ex.Retries) != venturi.DefaultMaxFailures-1 {
		t.Fatalf("%d retries, want one per failure before the backstop", len(ex.Retries))
	}
	for i, d := range ex.Retries {
		if want := venturi.Jitter(b.Delay(i+1), venturi.DefaultJitterFraction, ex.Job.ID, i+1); d != want {
			t.Fatalf("retry %d: %v, want %v", i+1, d, want)
		}
	}
	if n := countJobs(t, pool, "true"); n != 0 || called {
		t.Fatalf("explain left %d jobs, middleware called %v", n, called)
	}
	select {
	case e := <-sub.Events():
		t.Fatalf("explain published %+v", e)
	default:
	}
}

// TestExplainMeetsThePendingJob: with a pending job of the key, Explain shows it as it is,
// the merge's decision and the job as the merge would leave it, and changes nothing.
func TestExplainMeetsThePendingJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	r := enqueue(t, q, opsTask{N: 1, Key: "k"}, venturi.After(time.Hour))
	ex, err := q.Explain(ctx, opsTask{N: 2, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Action != venturi.ActionReplaced || ex.Pending == nil || ex.Pending.ID != r.ID || ex.Job.ID != r.ID ||
		ex.DedupKey != "k" || ex.Job.State != venturi.StateAvailable || time.Until(ex.Due) > time.Minute {
		t.Fatalf("explanation %+v", ex)
	}
	var before, after opsTask
	if json.Unmarshal(ex.Pending.Payload, &before) != nil || json.Unmarshal(ex.Job.Payload, &after) != nil || before.N != 1 || after.N != 2 {
		t.Fatalf("payloads %s then %s", ex.Pending.Payload, ex.Job.Payload)
	}
	if !strings.Contains(strings.Join(ex.Notes, "; "), "merges into pending job "+r.ID.String()+" (replaced)") ||
		!strings.Contains(strings.Join(ex.Notes, "; "), "moves its due time") {
		t.Fatalf("notes %q", ex.Notes)
	}
	j := jobByID(t, q, r.ID)
	if j.State != venturi.StateScheduled || len(j.Journal) != 0 || countJobs(t, pool, "true") != 1 {
		t.Fatalf("the pending job changed: %+v", j)
	}
}

// TestExplainRetriesAreTheWorkers: the retry schedule Explain reports for a pending job is
// the one a worker then applies to it, failure by failure (the same jitter).
func TestExplainRetriesAreTheWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	enqueue(t, q, opsTask{Key: "r", Fail: 4}, venturi.After(time.Hour))
	ex, err := q.Explain(ctx, opsTask{Key: "r", Fail: 4})
	if err != nil {
		t.Fatal(err)
	}
	enqueue(t, q, opsTask{Key: "r", Fail: 4}) // due now
	startOpsWorker(t, pool, fastConfig())
	j := waitState(t, q, venturi.Result{ID: ex.Job.ID}, venturi.StateCompleted)
	var got []time.Duration
	for _, e := range j.Journal {
		if e.Event == venturi.EventFailed {
			got = append(got, e.ResumeIn)
		}
	}
	if len(got) != 4 || !slices.Equal(got, ex.Retries[:4]) {
		t.Fatalf("the worker waited %v; Explain said %v", got, ex.Retries[:4])
	}
}

// TestExplainNotesFlowControl: a paused queue, a queue limit, a slot and a kind's limits are
// named in the notes.
func TestExplainNotesFlowControl(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	if err := q.PauseQueue(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	if err := q.SetQueueConcurrency(ctx, "media", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_kind (kind, concurrency, rate_n, rate_period) VALUES ('ops', 3, 5, '1 minute')`); err != nil {
		t.Fatal(err)
	}
	ex, err := q.Explain(ctx, opsTask{Q: "media"})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(ex.Notes, "\n")
	for _, want := range []string{"queue media is paused", "queue media runs at most 2 jobs at once (0 running)",
		"kind ops runs at most 3 at once (0 running)", "rate 5/1m0s: 0 started in the current window"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes do not say %q:\n%s", want, notes)
		}
	}
	if !ex.Job.Gated {
		t.Fatalf("a job of a kind with limits is gated: %+v", ex.Job)
	}
}

// TestExplainJobSaysWhereItIs: ExplainJob's reasons for each state, and the rest of the
// retry schedule from the job's failures.
func TestExplainJobSaysWhereItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	id := seed(t, pool,
		seedJob{state: "scheduled", runAt: 3 * time.Minute},
		seedJob{state: "waiting", runAt: time.Hour},
		seedJob{state: "dead", journal: `[{"event": "dead", "run": 1, "note": "permanent: no such host"}]`},
		seedJob{state: "running", lease: time.Minute},
		seedJob{state: "available", queue: "held"},
	)
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET wait_signals = '{confirm}', failures = 2 WHERE id = $1`, id[1][:]); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, id[3], "operator says stop"); err != nil {
		t.Fatal(err)
	}
	if err := q.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	// The first two are due in a time counted from now: seconds may pass on a loaded
	// machine between the seed and the explanation.
	for i, want := range []string{`due in (3m|2m5\ds)`, `waiting for signal confirm \(timeout in (1h0m|59m)`, `after 0 failures: permanent: no such host`,
		`asked to stop \(cancelled\): operator says stop`, `queue held is paused`} {
		ex, err := q.ExplainJob(ctx, id[i])
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(want).MatchString(strings.Join(ex.Reasons, "\n")) {
			t.Errorf("job %d: reasons %q do not say %q", i, ex.Reasons, want)
		}
		switch i {
		case 1: // two failures: the schedule goes on from the third
			if len(ex.Retries) != venturi.DefaultMaxFailures-3 ||
				ex.Retries[0] != venturi.Jitter(venturi.DefaultBackoff.Delay(3), venturi.DefaultJitterFraction, id[i], 3) {
				t.Errorf("waiting job's retries %v", ex.Retries)
			}
		case 2:
			if len(ex.Retries) != 0 {
				t.Errorf("a dead job has retries %v", ex.Retries)
			}
		}
	}
	if _, err := q.ExplainJob(ctx, ulid.Make()); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

// opsDetail fails once (after a memoized step), then hands out a hook and waits for its
// signal, then completes.
type opsDetail struct{}

func (opsDetail) Kind() string { return "ops_detail" }

func (opsDetail) Handle(ctx context.Context, run *venturi.Run[struct{}], hooks chan<- string) (venturi.Outcome, error) {
	switch run.RunCount() {
	case 1:
		if _, err := venturi.Step(ctx, run, "fetch", func(context.Context) (int, error) { return 7, nil }); err != nil {
			return venturi.Outcome{}, err
		}
		_ = run.SetAttachment(map[string]int{"status": 503})
		return venturi.Outcome{}, venturi.RetryIn(time.Millisecond, errors.New("flaky"))
	case 2:
		token, err := run.CreateHook(ctx, "confirm", time.Hour, false)
		if err != nil {
			return venturi.Outcome{}, err
		}
		hooks <- token
		return venturi.WaitForSignal(time.Hour, "confirm"), nil
	}
	if _, err := run.Signals(ctx, "confirm"); err != nil { // read: consumed when this run ends
		return venturi.Outcome{}, err
	}
	return venturi.CompletedWith("confirmed"), nil
}

// TestJobDetailReadsEverything: a job's runs (from its journal), memoized steps, signals
// (with when they were consumed), hooks (without tokens) and explanation.
func TestJobDetailReadsEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	hooks := make(chan string, 1)
	w := newWorker(t, pool, (chan<- string)(hooks), fastConfig())
	venturi.MustRegister[opsDetail](w)
	startWorker(t, w)
	r := enqueue(t, q, opsDetail{})
	token := recv(t, hooks, "the hook")
	waitState(t, q, r, venturi.StateWaiting)
	if _, _, err := q.ResumeHook(ctx, token, map[string]bool{"ok": true}); err != nil {
		t.Fatal(err)
	}
	waitState(t, q, r, venturi.StateCompleted)
	d, err := q.JobDetail(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID != r.ID || d.State != venturi.StateCompleted || len(d.Runs) != 3 {
		t.Fatalf("detail %+v", d)
	}
	for i, want := range []venturi.Event{venturi.EventFailed, venturi.EventWaiting, venturi.EventCompleted} {
		run := d.Runs[i]
		if run.Run != i+1 || run.Event != want || run.Worker == "" || run.StartedAt.IsZero() || run.EndedAt.Before(run.StartedAt) ||
			run.Duration != run.EndedAt.Sub(run.StartedAt) {
			t.Fatalf("run %d: %+v", i+1, run)
		}
	}
	if d.Runs[0].Note != "flaky" || string(d.Runs[0].Attachment) != `{"status": 503}` || d.Runs[1].ResumeIn != time.Hour {
		t.Fatalf("runs %+v", d.Runs)
	}
	if len(d.Steps) != 1 || d.Steps[0].Name != "fetch" || string(d.Steps[0].Result) != "7" {
		t.Fatalf("steps %+v", d.Steps)
	}
	if len(d.Signals) != 1 || d.Signals[0].Name != "confirm" || d.Signals[0].ConsumedAt == nil {
		t.Fatalf("signals %+v", d.Signals)
	}
	if len(d.Hooks) != 1 || d.Hooks[0].Name != "confirm" || d.Hooks[0].UsedAt == nil {
		t.Fatalf("hooks %+v", d.Hooks)
	}
	if d.Explain == nil || !strings.HasPrefix(d.Explain.Reasons[0], "completed at") || len(d.Explain.Retries) != 0 {
		t.Fatalf("explain %+v", d.Explain)
	}
	if _, err := q.JobDetail(ctx, ulid.Make()); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}
