package venturi_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// infoTask ends its runs as Do says; Part puts it under flow control (the gated claim).
type infoTask struct {
	Do   string `json:"do"` // complete, fail, permanent, pause, cancel, wait, complete_tx
	Part string `json:"part,omitempty"`
}

func (infoTask) Kind() string        { return "info_task" }
func (t infoTask) Partition() string { return t.Part }

func (t infoTask) Handle(ctx context.Context, run *venturi.Run[struct{}], r *infoRuns) (venturi.Outcome, error) {
	first := run.RunCount() == 1
	switch {
	case t.Do == "complete_tx":
		tx, err := r.pool.Begin(ctx)
		if err != nil {
			return venturi.Outcome{}, err
		}
		defer tx.Rollback(ctx)
		o, err := run.CompleteTx(ctx, tx, venturi.CompletedWith("in the transaction"))
		if err != nil {
			return o, err
		}
		return o, tx.Commit(ctx)
	case t.Do == "fail":
		return venturi.Outcome{}, errors.New("always fails")
	case t.Do == "permanent":
		return venturi.Outcome{}, venturi.Permanentf("never again")
	case t.Do == "cancel":
		return venturi.Cancelled("not needed"), nil
	case t.Do == "pause" && first:
		return venturi.PauseIn(0), nil
	case t.Do == "wait" && first:
		return venturi.WaitForSignal(time.Millisecond, "go"), nil
	}
	return venturi.Completed(), nil
}

// infoRun is what the middleware saw of one run.
type infoRun struct {
	due, started time.Time
	end          venturi.Event
}

type infoRuns struct {
	pool *pgxpool.Pool
	mu   sync.Mutex
	runs map[ulid.ULID]map[int]infoRun
}

func (r *infoRuns) middleware(ctx context.Context, job *venturi.JobInfo, next func(context.Context) (venturi.Outcome, error)) (venturi.Outcome, error) {
	o, err := next(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[job.ID] == nil {
		r.runs[job.ID] = map[int]infoRun{}
	}
	r.runs[job.ID][job.Run] = infoRun{due: job.Due, started: job.StartedAt, end: job.EndEvent(o, err)}
	return o, err
}

func (r *infoRuns) of(id ulid.ULID) map[int]infoRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

// JobInfo.Due and StartedAt are the job's due time and the run's claim time (database
// clock), by either claim; EndEvent names the event that the worker then journals, the
// backstop's dead included.
func TestJobInfoDueStartedAtAndEndEvent(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	runs := &infoRuns{pool: pool, runs: map[ulid.ULID]map[int]infoRun{}}
	cfg := fastConfig()
	cfg.MaxFailures = 2
	cfg.Middleware = []venturi.WorkMiddleware{runs.middleware}
	startWorkerFor[infoTask](t, pool, runs, cfg)

	cases := []struct {
		do    string
		state venturi.State
		ends  []venturi.Event // per run
	}{
		{"complete", venturi.StateCompleted, []venturi.Event{venturi.EventCompleted}},
		{"complete_tx", venturi.StateCompleted, []venturi.Event{venturi.EventCompleted}},
		{"fail", venturi.StateDead, []venturi.Event{venturi.EventFailed, venturi.EventDead}},
		{"permanent", venturi.StateDead, []venturi.Event{venturi.EventDead}},
		{"cancel", venturi.StateCancelled, []venturi.Event{venturi.EventCancelled}},
		{"pause", venturi.StateCompleted, []venturi.Event{venturi.EventPaused, venturi.EventCompleted}},
		{"wait", venturi.StateCompleted, []venturi.Event{venturi.EventWaiting, venturi.EventCompleted}},
	}
	for _, part := range []string{"", "p"} { // the plain claim, the gated claim
		for _, c := range cases {
			task := infoTask{Do: c.do, Part: part}
			// The due time given, not read back: on a loaded machine the job may have run,
			// failed and been rescheduled before a read after the enqueue.
			due := time.Now().Add(200 * time.Millisecond).Truncate(time.Microsecond)
			r := enqueue(t, q, task, venturi.At(due))
			j := waitState(t, q, r, c.state)
			// A run that completes in its own transaction (CompleteTx) ends the job before its
			// handler returns through the middleware: wait for the middleware's record.
			eventually(t, 10*time.Second, "the middleware's record of every run", func() bool { return len(runs.of(r.ID)) >= len(c.ends) })
			got := runs.of(r.ID)
			if len(got) != len(c.ends) {
				t.Fatalf("%+v: middleware saw runs %v, want %d", task, got, len(c.ends))
			}
			byRun := map[int]venturi.JournalEntry{}
			for _, e := range j.Journal {
				if e.Run > 0 {
					byRun[e.Run] = e
				}
			}
			for n, want := range c.ends {
				run, entry := got[n+1], byRun[n+1]
				if run.end != want || entry.Event != want {
					t.Errorf("%+v run %d: EndEvent %q, journal %q, want %q", task, n+1, run.end, entry.Event, want)
				}
				if !run.started.Equal(entry.StartedAt) {
					t.Errorf("%+v run %d: StartedAt %v, journal's %v", task, n+1, run.started, entry.StartedAt)
				}
				if run.due.IsZero() || run.started.Before(run.due) {
					t.Errorf("%+v run %d: Due %v, StartedAt %v: the run started before it was due", task, n+1, run.due, run.started)
				}
			}
			if first := got[1]; !first.due.Equal(due) {
				t.Errorf("%+v: run 1 Due %v, the job's RunAt at enqueue %v", task, first.due, due)
			}
			if len(c.ends) > 1 && got[2].due.Before(got[1].started) {
				t.Errorf("%+v: run 2 due %v before run 1 started %v", task, got[2].due, got[1].started)
			}
		}
	}
}

// A JobInfo not made by a worker (a middleware's unit test) still names outcomes.
func TestJobInfoEndEventWithoutAWorker(t *testing.T) {
	t.Parallel()
	var j venturi.JobInfo
	for _, c := range []struct {
		o    venturi.Outcome
		err  error
		want venturi.Event
	}{
		{venturi.Completed(), nil, venturi.EventCompleted},
		{venturi.PauseIn(time.Second), nil, venturi.EventPaused},
		{venturi.Cancelled("x"), nil, venturi.EventCancelled},
		{venturi.WaitForSignal(time.Second, "s"), nil, venturi.EventWaiting},
		{venturi.Outcome{}, errors.New("x"), venturi.EventFailed},
		{venturi.Outcome{}, venturi.Permanentf("x"), venturi.EventDead},
	} {
		if got := j.EndEvent(c.o, c.err); got != c.want {
			t.Errorf("EndEvent(%v, %v) = %q, want %q", c.o, c.err, got, c.want)
		}
	}
}
