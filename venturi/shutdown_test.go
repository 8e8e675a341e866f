package venturi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// stubbornTask blocks until its context is cancelled, ignoring run.Shutdown().
type stubbornTask struct{ N int }

func (stubbornTask) Kind() string { return "stubborn" }

func (stubbornTask) Handle(ctx context.Context, run *venturi.Run[struct{}], started chan<- ulid.ULID) (venturi.Outcome, error) {
	started <- run.ID()
	<-ctx.Done()
	return venturi.Outcome{}, ctx.Err()
}

func TestShutdownInterruptsHandlerAfterGrace(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	started := make(chan ulid.ULID, 10)
	cfg := fastConfig()
	cfg.Concurrency = 1
	cfg.ShutdownGrace = 200 * time.Millisecond
	w := startWorkerFor[stubbornTask](t, pool, (chan<- ulid.ULID)(started), cfg)
	first := enqueue(t, q, stubbornTask{N: 0})
	if id := recv(t, started, "the first run"); id != first.ID {
		t.Fatalf("started %s, want %s", id, first.ID)
	}
	// Queued behind the busy slot: never started.
	var waiting []venturi.Result
	for i := 1; i <= 3; i++ {
		r := enqueue(t, q, stubbornTask{N: i})
		waiting = append(waiting, r)
	}
	stopWorker(t, w)

	j := jobByID(t, q, first.ID)
	if j.State != venturi.StateAvailable || eventsOf(j) != "interrupted" || j.Failures != 0 || j.RunCount != 1 {
		t.Fatalf("interrupted job: state %s, journal %+v, failures %d, runs %d", j.State, j.Journal, j.Failures, j.RunCount)
	}
	if e := j.Journal[0]; !strings.Contains(e.Note, "shutdown") || e.Run != 1 || e.Worker != w.ID() {
		t.Fatalf("interrupted entry = %+v", e)
	}
	for _, r := range waiting {
		if j := jobByID(t, q, r.ID); j.State != venturi.StateAvailable || j.RunCount != 0 || len(j.Journal) != 0 || j.Failures != 0 {
			t.Fatalf("job that never started: state %s, runs %d, journal %+v", j.State, j.RunCount, j.Journal)
		}
	}
	if n := countJobs(t, pool, "lease_token IS NOT NULL OR state = 'running'"); n != 0 {
		t.Fatalf("%d jobs still hold a lease after Stop", n)
	}
	select {
	case id := <-started:
		t.Fatalf("job %s started during shutdown", id)
	default:
	}
}

type checkpointCarry struct {
	Checkpoint int `json:"checkpoint"`
}

// politeTask checkpoints and pauses when shutdown is signalled.
type politeTask struct{}

func (politeTask) Kind() string { return "polite" }

type politeApp struct {
	started chan ulid.ULID
	sawFlag chan bool
}

func (politeTask) Handle(ctx context.Context, run *venturi.Run[checkpointCarry], app *politeApp) (venturi.Outcome, error) {
	if run.Carry().Checkpoint > 0 {
		return venturi.CompletedWith("resumed"), nil
	}
	app.started <- run.ID()
	before := run.ShuttingDown()
	select {
	case <-run.Shutdown():
		app.sawFlag <- !before && run.ShuttingDown() && ctx.Err() == nil
		run.CarryMut().Checkpoint = 3
		return venturi.PauseInWith(0, "checkpointed at 3"), nil
	case <-ctx.Done():
		return venturi.Outcome{}, ctx.Err()
	}
}

func TestShutdownSignalLetsHandlerPause(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	app := &politeApp{started: make(chan ulid.ULID, 1), sawFlag: make(chan bool, 1)}
	cfg := fastConfig()
	cfg.ShutdownGrace = within // the handler returns long before
	w := startWorkerFor[politeTask](t, pool, app, cfg)
	r := enqueue(t, q, politeTask{})
	recv(t, app.started, "the run")
	stopWorker(t, w)
	if !recv(t, app.sawFlag, "the handler's view of the signal") {
		t.Fatal("ShuttingDown() was set before the signal, unset after it, or ctx was already cancelled")
	}
	j := jobByID(t, q, r.ID)
	var c checkpointCarry
	decodeCarry(t, j, &c)
	if j.State != venturi.StateAvailable || eventsOf(j) != "paused" || j.Journal[0].Note != "checkpointed at 3" || c.Checkpoint != 3 || j.Failures != 0 {
		t.Fatalf("state %s, journal %+v, carry %s", j.State, j.Journal, j.Carry)
	}
	// A new worker resumes from the checkpoint.
	startWorkerFor[politeTask](t, pool, app, fastConfig())
	j = waitState(t, q, r, venturi.StateCompleted)
	if eventsOf(j) != "paused,completed" || lastEntry(j).Note != "resumed" {
		t.Fatalf("journal %+v", j.Journal)
	}
}

// deafTask ignores both the shutdown signal and its context until released.
type deafTask struct{}

func (deafTask) Kind() string { return "deaf" }

type deafApp struct {
	started chan ulid.ULID
	release chan struct{}
}

func (deafTask) Handle(ctx context.Context, run *venturi.Run[struct{}], app *deafApp) (venturi.Outcome, error) {
	app.started <- run.ID()
	<-app.release
	return venturi.CompletedWith("too late"), nil
}

// TestShutdownReleasesHandlerThatNeverReturns: Stop does not wait forever for a handler
// that ignores cancellation; it releases the job back to available with an interrupted
// entry that is not a failure.
func TestShutdownReleasesHandlerThatNeverReturns(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	app := &deafApp{started: make(chan ulid.ULID, 1), release: make(chan struct{})}
	defer close(app.release)
	cfg := fastConfig()
	cfg.ShutdownGrace = 100 * time.Millisecond
	cfg.Lease = 2 * time.Second // Stop waits Lease/2 after cancelling before releasing
	w := startWorkerFor[deafTask](t, pool, app, cfg)
	r := enqueue(t, q, deafTask{})
	recv(t, app.started, "the run")
	stopWorker(t, w)
	j := jobByID(t, q, r.ID)
	if j.State != venturi.StateAvailable || eventsOf(j) != "interrupted" || j.Failures != 0 {
		t.Fatalf("state %s, journal %+v, failures %d", j.State, j.Journal, j.Failures)
	}
}
