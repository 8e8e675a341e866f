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

// Failed runs: permanent and retryable errors, the failure backstop, the retry schedule
// (worker and per-task backoff), and what each retry sees of its history and carry.

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
	pool, q := newQueue(t)
	app := &failApp{}
	w := startWorkerFor[failTask](t, pool, app, cfg)
	r := enqueue(t, q, task)
	j := waitFinished(t, q, r.ID)
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
	t.Parallel()
	cfg := fastConfig()
	j, obs := runFailTask(t, cfg, failTask{FailRuns: 100, Permanent: true}, venturi.StateDead)
	if len(obs) != 1 || j.RunCount != 1 || j.Failures != 1 || eventsOf(j) != "dead" || j.Journal[0].Note != "transient failure 1" ||
		j.FinishedAt == nil {
		t.Fatalf("runs %d, failures %d, journal %+v", j.RunCount, j.Failures, j.Journal)
	}
}

func TestRetryableErrorsHitTheBackstop(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	for _, jitter := range []float64{-1, 0.5} {
		t.Run(fmt.Sprint("jitter ", jitter), func(t *testing.T) {
			t.Parallel() // each subtest has its own schema
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
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.JitterFraction = -1
	cfg.Backoff = venturi.Backoff{Base: time.Millisecond, Cap: 7 * time.Millisecond}
	startWorkerFor[slowBackoffTask](t, pool, struct{}{}, cfg)
	r := enqueue(t, q, slowBackoffTask{})
	j := waitState(t, q, r, venturi.StateCompleted)
	// The task's 3ms base with the worker's 7ms cap: 0, 0, 3ms, 6ms.
	want := []time.Duration{0, 0, 3 * time.Millisecond, 6 * time.Millisecond}
	for i, d := range want {
		if j.Journal[i].ResumeIn != d {
			t.Errorf("failure %d: resume_in %v, want %v", i+1, j.Journal[i].ResumeIn, d)
		}
	}
}
