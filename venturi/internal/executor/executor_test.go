package executor_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/executor"
	"github.com/venturi-dev/venturi/internal/jobrun"
)

// within bounds every wait of these tests: the conditions they wait for come at once;
// the bound only keeps a broken executor from hanging the test.
const within = 30 * time.Second

var (
	errLeaseLost = errors.New("lease lost")
	errHard      = errors.New("hard cancel")
)

// testBundle is an executor whose runs block until released, with what it reports.
type testBundle struct {
	t       *testing.T
	tracker *jobrun.Tracker
	e       *executor.Executor
	release chan struct{}    // each receive lets one blocked run return
	entered chan struct{}    // a run entered Run
	ended   chan *jobrun.End // Ended's calls
	inRun   int              // runs that entered and were not released, as the test counts them
	mu      sync.Mutex
	running int // runs in Run now
	most    int // the most runs in Run at once
	causes  []error
}

// setup returns an executor of concurrency handlers. Each run waits for a release or
// for its context to end, and records its context's cause.
func setup(t *testing.T, concurrency int) *testBundle {
	t.Helper()
	b := &testBundle{t: t, release: make(chan struct{}), entered: make(chan struct{}, 100), ended: make(chan *jobrun.End, 100)}
	b.tracker = jobrun.NewTracker(jobrun.TrackerConfig{
		Lease: time.Minute, Grace: time.Minute, Logger: slog.Default(),
		LeaseLost: errLeaseLost, Stopped: errors.New("stopped"), TimedOut: errors.New("timed out"),
	})
	b.e = executor.New(context.Background(), executor.Config{
		Concurrency: concurrency, Tracker: b.tracker, LeaseLost: errLeaseLost,
		Run: func(ctx context.Context, j *jobrun.Job) *jobrun.End {
			b.mu.Lock()
			b.running++
			b.most = max(b.most, b.running)
			b.mu.Unlock()
			b.entered <- struct{}{}
			var cause error
			select {
			case <-b.release:
			case <-ctx.Done():
				cause = context.Cause(ctx)
			}
			b.mu.Lock()
			b.running--
			b.causes = append(b.causes, cause)
			b.mu.Unlock()
			return &jobrun.End{Job: j}
		},
		Ended: func(end *jobrun.End) { b.ended <- end },
	})
	return b
}

// job returns a claimed job, tracked.
func (b *testBundle) job() *jobrun.Job {
	j := &jobrun.Job{ID: ulid.Make(), Kind: "k", Sent: time.Now(), Stop: jobrun.NewStop()}
	b.tracker.Add([]*jobrun.Job{j})
	return j
}

// waitRunning waits until n runs that were not released are in Run.
func (b *testBundle) waitRunning(n int) {
	b.t.Helper()
	for b.inRun < n {
		select {
		case <-b.entered:
			b.inRun++
		case <-time.After(within):
			b.t.Fatalf("%d runs running after %v, want %d", b.inRun, within, n)
		}
	}
}

// releaseOne lets one blocked run return.
func (b *testBundle) releaseOne() {
	b.release <- struct{}{}
	b.inRun--
}

// waitEnded waits for n calls of Ended and returns their ends.
func (b *testBundle) waitEnded(n int) []*jobrun.End {
	b.t.Helper()
	var ends []*jobrun.End
	for len(ends) < n {
		select {
		case end := <-b.ended:
			ends = append(ends, end)
		case <-time.After(within):
			b.t.Fatalf("%d of %d runs ended within %v", len(ends), n, within)
		}
	}
	return ends
}

// waitClosed waits for ch to close.
func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s not closed within %v", what, within)
	}
}

// TestExecutorRunsAtMostConcurrency: jobs started whenever a slot is free run with at
// most Concurrency at once, each ending through Ended with its run marked ended, and
// every freed slot is reported.
func TestExecutorRunsAtMostConcurrency(t *testing.T) {
	t.Parallel()
	const concurrency, n = 3, 20
	b := setup(t, concurrency)
	if got := b.e.Free(); got != concurrency {
		t.Fatalf("Free() = %d on a new executor, want %d", got, concurrency)
	}
	jobs := map[*jobrun.Job]bool{}
	for range n {
		for b.e.Free() == 0 {
			b.waitRunning(concurrency)
			b.releaseOne()
			select {
			case <-b.e.Freed():
			case <-time.After(within):
				t.Fatalf("no slot freed within %v", within)
			}
		}
		j := b.job()
		jobs[j] = true
		b.e.Start(j)
	}
	b.waitRunning(concurrency)
	for range concurrency {
		b.releaseOne()
	}
	for _, end := range b.waitEnded(n) {
		if !jobs[end.Job] {
			t.Fatalf("Ended with a job that was not started: %+v", end.Job)
		}
		delete(jobs, end.Job)
	}
	waitClosed(t, "Idle", b.e.Idle())
	if b.most != concurrency {
		t.Fatalf("at most %d runs at once, want %d", b.most, concurrency)
	}
	if got := b.e.Free(); got != concurrency {
		t.Fatalf("Free() = %d once every run ended, want %d", got, concurrency)
	}
	if got := len(b.tracker.Stuck()); got != 0 {
		t.Fatalf("%d runs not marked ended", got)
	}
}

// TestExecutorSkipsLostLease: a job the tracker no longer holds (its lease ran out while
// it waited) does not run, and its slot stays free.
func TestExecutorSkipsLostLease(t *testing.T) {
	t.Parallel()
	b := setup(t, 2)
	j := &jobrun.Job{ID: ulid.Make(), Kind: "k", Sent: time.Now()} // not tracked
	b.e.Start(j)
	if got := b.e.Free(); got != 2 {
		t.Fatalf("Free() = %d after a job that cannot start, want 2", got)
	}
	b.e.Shutdown()
	waitClosed(t, "Idle", b.e.Idle())
	if len(b.causes) != 0 || len(b.ended) != 0 {
		t.Fatalf("a job that cannot start ran (%d runs, %d ends)", len(b.causes), len(b.ended))
	}
}

// TestExecutorShutdownWaitsForRunningHandlers: Shutdown signals ShuttingDown at once, and
// Idle closes only once the running handlers returned.
func TestExecutorShutdownWaitsForRunningHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	b.e.Start(b.job())
	b.e.Start(b.job())
	b.waitRunning(2)
	select {
	case <-b.e.ShuttingDown():
		t.Fatal("ShuttingDown closed before Shutdown")
	default:
	}
	b.e.Shutdown()
	waitClosed(t, "ShuttingDown", b.e.ShuttingDown())
	idle := b.e.Idle()
	b.releaseOne()
	b.waitEnded(1)
	select {
	case <-idle:
		t.Fatal("Idle closed while a handler was running")
	default:
	}
	b.releaseOne()
	b.waitEnded(1)
	waitClosed(t, "Idle", idle)
	for _, c := range b.causes {
		if c != nil {
			t.Fatalf("a released run saw its context cancelled: %v", c)
		}
	}
}

// TestExecutorCancelCancelsRunningContexts: Cancel cancels the context of every running
// handler with its cause.
func TestExecutorCancelCancelsRunningContexts(t *testing.T) {
	t.Parallel()
	b := setup(t, 4)
	for range 3 {
		b.e.Start(b.job())
	}
	b.waitRunning(3)
	b.e.Shutdown()
	b.e.Cancel(errHard)
	b.waitEnded(3)
	waitClosed(t, "Idle", b.e.Idle())
	for _, c := range b.causes {
		if c != errHard {
			t.Fatalf("a run's context ended with %v, want %v", c, errHard)
		}
	}
}
