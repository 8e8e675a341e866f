package venturi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// cancellable blocks until released (Hold), until Run.Shutdown closes (unless Deaf), or
// until its context ends; with Fail it then fails instead of completing or pausing.
type cancellable struct {
	N    int
	Key  string
	Hold bool
	Deaf bool
	Fail bool
	Self bool // cancels itself
}

func (cancellable) Kind() string                 { return "cancellable" }
func (c cancellable) DedupKey() venturi.DedupKey { return venturi.DedupKey(c.Key) }
func (c cancellable) Handle(ctx context.Context, run *venturi.Run[struct{}], st flowState) (venturi.Outcome, error) {
	if c.Self {
		return venturi.Cancelled("the bookmark was deleted"), nil
	}
	if !c.Hold {
		return venturi.Completed(), nil
	}
	st.g.enter("running")
	defer st.g.leave("running")
	shutdown := run.Shutdown()
	if c.Deaf {
		shutdown = nil
	}
	select {
	case <-st.hold:
		if c.Fail {
			return venturi.Outcome{}, errors.New("upstream failed")
		}
		return venturi.Completed(), nil
	case <-shutdown:
		if c.Fail {
			return venturi.Outcome{}, errors.New("gave up")
		}
		return venturi.PauseInWith(0, "checkpoint at page 3"), nil
	case <-ctx.Done():
		return venturi.Outcome{}, ctx.Err()
	}
}

// TestCancelPendingJob: a pending job ends cancelled at once, journaled with the reason,
// and never runs; a second cancel is idempotent; a finished job refuses.
func TestCancelPendingJob(t *testing.T) {
	t.Parallel()
	_, q := newQueue(t)
	ctx := context.Background()
	r := enqueue(t, q, cancellable{N: 1}, venturi.After(time.Hour))
	if res, err := q.Cancel(ctx, r.ID, "user asked"); err != nil || res != venturi.CancelEnded {
		t.Fatalf("Cancel = %v, %v", res, err)
	}
	j := jobByID(t, q, r.ID)
	if e := lastEntry(j); j.State != venturi.StateCancelled || e.Event != venturi.EventCancelled || e.Note != "user asked" || j.FinishedAt == nil {
		t.Fatalf("job %s, entry %s %q", j.State, e.Event, e.Note)
	}
	if res, err := q.Cancel(ctx, r.ID, "again"); err != nil || res != venturi.CancelAlready {
		t.Fatalf("second Cancel = %v, %v", res, err)
	}
	if _, err := q.Cancel(ctx, ulid.Make(), "x"); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("Cancel of an unknown job: %v", err)
	}
}

// TestCancelRunningJob: a running job's handler sees Run.Shutdown and whatever it
// reports short of completing (a pause here), the job ends cancelled with the reason,
// not failed and not run again.
func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	startFlowWorkers[cancellable](t, pool, st, 1, fastConfig())
	r := enqueue(t, q, cancellable{N: 1, Hold: true})
	waitState(t, q, r, venturi.StateRunning)
	if res, err := q.Cancel(ctx, r.ID, "import cancelled by its owner"); err != nil || res != venturi.CancelRequested {
		t.Fatalf("Cancel = %v, %v", res, err)
	}
	j := waitState(t, q, r, venturi.StateCancelled)
	e := lastEntry(j)
	if e.Event != venturi.EventCancelled || !strings.HasPrefix(e.Note, "import cancelled by its owner: checkpoint at page 3") || j.Failures != 0 || j.RunCount != 1 {
		t.Fatalf("entry %s %q, failures %d, runs %d", e.Event, e.Note, j.Failures, j.RunCount)
	}
	if _, err := q.Cancel(ctx, r.ID, "again"); err != nil {
		t.Fatalf("Cancel of a cancelled job: %v", err)
	}
}

// TestCancelIsEnforcedByTheDatabase: a worker that never hears of the cancel (no
// notifications, a long lease) and whose run then fails still ends the job cancelled:
// the statement that writes the run's end enforces the request.
func TestCancelIsEnforcedByTheDatabase(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	cfg := fastConfig()
	cfg.PollOnly, cfg.Lease = true, time.Minute
	startFlowWorkers[cancellable](t, pool, st, 1, cfg)
	r := enqueue(t, q, cancellable{N: 1, Hold: true, Deaf: true})
	waitState(t, q, r, venturi.StateRunning)
	quiet := venturi.NewQueue(pool, venturi.QueueConfig{NoNotify: true})
	if res, err := quiet.Cancel(ctx, r.ID, "stop it"); err != nil || res != venturi.CancelRequested {
		t.Fatalf("Cancel = %v, %v", res, err)
	}
	close(st.hold) // the run completes: a completion wins over a pending cancel
	j := waitState(t, q, r, venturi.StateCompleted)
	if !j.StopRequested || j.StopEvent != venturi.EventCancelled {
		t.Fatalf("stop request not visible: %+v", j)
	}

	st2 := flowState{g: newGauge(), hold: make(chan struct{})}
	pool2, q2 := newQueue(t)
	startFlowWorkers[cancellable](t, pool2, st2, 1, cfg)
	r2 := enqueue(t, q2, cancellable{N: 2, Hold: true, Deaf: true, Fail: true})
	waitState(t, q2, r2, venturi.StateRunning)
	quiet2 := venturi.NewQueue(pool2, venturi.QueueConfig{NoNotify: true})
	if _, err := quiet2.Cancel(ctx, r2.ID, "stop it"); err != nil {
		t.Fatal(err)
	}
	// The worker does not know; its run fails, which would retry it: the database makes the
	// job cancelled, the run's entry the request's, and counts no failure.
	close(st2.hold)
	j = waitState(t, q2, r2, venturi.StateCancelled)
	if got := eventsOf(j); got != "cancelled" || lastEntry(j).Note != "stop it: upstream failed" || j.RunCount != 1 || j.Failures != 0 {
		t.Fatalf("journal %s (%q), runs %d, failures %d", got, lastEntry(j).Note, j.RunCount, j.Failures)
	}
	_ = pool
}

// TestCancelByKey cancels the pending and the running job of one dedup key.
func TestCancelByKey(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	startFlowWorkers[cancellable](t, pool, st, 1, fastConfig())
	running := enqueue(t, q, cancellable{N: 1, Key: "import/9", Hold: true})
	waitState(t, q, running, venturi.StateRunning)
	pending := enqueue(t, q, cancellable{N: 2, Key: "import/9"}, venturi.After(time.Hour))
	other := enqueue(t, q, cancellable{N: 3, Key: "import/10"}, venturi.After(time.Hour))
	got, err := q.CancelByKey(ctx, "cancellable", "import/9", "owner deleted the import")
	if err != nil || got[running.ID] != venturi.CancelRequested || got[pending.ID] != venturi.CancelEnded || len(got) != 2 {
		t.Fatalf("CancelByKey = %v, %v", got, err)
	}
	waitState(t, q, running, venturi.StateCancelled)
	if j := jobByID(t, q, other.ID); j.State != venturi.StateScheduled {
		t.Fatalf("another key's job is %s", j.State)
	}
}

// TestHandlerCancelsItsJob: a handler returning Cancelled ends its job cancelled.
func TestHandlerCancelsItsJob(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	startFlowWorkers[cancellable](t, pool, flowState{g: newGauge()}, 1, fastConfig())
	j := waitState(t, q, enqueue(t, q, cancellable{Self: true}), venturi.StateCancelled)
	if e := lastEntry(j); e.Event != venturi.EventCancelled || e.Note != "the bookmark was deleted" || j.Failures != 0 {
		t.Fatalf("entry %s %q", e.Event, e.Note)
	}
}

// TestCancelRacesCompletion: cancels sent while runs complete: each job ends exactly
// once, completed or cancelled, and its journal says which.
func TestCancelRacesCompletion(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	startFlowWorkers[cancellable](t, pool, flowState{g: newGauge()}, 2, fastConfig())
	var ids []ulid.ULID
	for i := range 40 {
		ids = append(ids, enqueue(t, q, cancellable{N: i}).ID)
	}
	concurrently(len(ids), func(i int) {
		if _, err := q.Cancel(ctx, ids[i], "race"); err != nil && !errors.Is(err, venturi.ErrJobFinished) {
			t.Errorf("Cancel: %v", err)
		}
	})
	for _, id := range ids {
		j := waitJob(t, q, id, "to end", func(j *venturi.Job) bool {
			return j.State == venturi.StateCompleted || j.State == venturi.StateCancelled
		})
		last := lastEntry(j)
		switch {
		case j.State == venturi.StateCompleted && last.Event == venturi.EventCompleted:
		case j.State == venturi.StateCancelled && last.Event == venturi.EventCancelled:
		default:
			t.Fatalf("job %s: %s with journal %s", id, j.State, eventsOf(j))
		}
		if j.RunCount > 1 {
			t.Fatalf("job %s ran %d times", id, j.RunCount)
		}
	}
}

// cancelPager counts pages in its carry until stopped; a stopped run pauses with its checkpoint.
type cancelPager struct{}

func (cancelPager) Kind() string { return "cancel_pager" }
func (cancelPager) Handle(ctx context.Context, run *venturi.Run[int], started chan<- struct{}) (venturi.Outcome, error) {
	*run.CarryMut() = 42 // pages done
	started <- struct{}{}
	<-run.Shutdown()
	return venturi.PauseInWith(0, "stopped after page 42"), nil
}

// TestCancelledRunKeepsItsCheckpoint: a run that sees the cancel and pauses leaves its
// carry with the cancelled job.
func TestCancelledRunKeepsItsCheckpoint(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	started := make(chan struct{}, 1)
	startWorkerFor[cancelPager](t, pool, (chan<- struct{})(started), fastConfig())
	r := enqueue(t, q, cancelPager{})
	recv(t, (<-chan struct{})(started), "the run to start")
	if _, err := q.Cancel(context.Background(), r.ID, "owner cancelled"); err != nil {
		t.Fatal(err)
	}
	j := waitState(t, q, r, venturi.StateCancelled)
	if string(j.Carry) != "42" || lastEntry(j).Note != "owner cancelled: stopped after page 42" {
		t.Fatalf("carry %s, note %q", j.Carry, lastEntry(j).Note)
	}
}
