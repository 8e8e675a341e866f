package venturi_test

import (
	"context"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

type prefetchTask struct{ N int }

func (prefetchTask) Kind() string { return "prefetch" }

// enqueuePrefetch enqueues n prefetch tasks in one call.
func enqueuePrefetch(t *testing.T, q *venturi.Queue, n int) {
	t.Helper()
	tasks := make([]venturi.Task, n)
	for i := range tasks {
		tasks[i] = prefetchTask{N: i}
	}
	if _, err := q.EnqueueMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
}

// Fast handlers outrun claims of Concurrency + Concurrency jobs: the buffer grows and
// later claims take more than the initial window. Every row one claim statement updates
// gets the same attempted_at (its now()), so grouping by it gives the claims' sizes.
func TestPrefetchGrowsForFastHandlers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	const n = 3000
	enqueuePrefetch(t, q, n)
	cfg := fastConfig() // Concurrency 4, Prefetch defaults to 1000: initial window 4 + 4
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegisterFunc(w, func(context.Context, prefetchTask, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	})
	startWorker(t, w)
	eventually(t, within, "3000 jobs completed", func() bool {
		return countJobs(t, pool, "kind = 'prefetch' AND state = 'completed'") == n
	})
	var largest int
	if err := pool.QueryRow(ctx, `SELECT max(n) FROM (
		SELECT count(*) AS n FROM venturi_job_all WHERE kind = 'prefetch' GROUP BY attempted_at) c`).Scan(&largest); err != nil {
		t.Fatal(err)
	}
	if window := cfg.Concurrency * 2; largest <= window {
		t.Fatalf("largest claim took %d jobs; the buffer never grew past the initial window of %d", largest, window)
	}
}

// Handlers that hold their slots keep the buffer at its base, min(Concurrency, Prefetch):
// the worker does not hoard jobs that another worker could run.
func TestPrefetchStaysSmallForBusyHandlers(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	const n = 40
	enqueuePrefetch(t, q, n)
	release := make(chan struct{})
	started := make(chan int, n)
	handle := func(ctx context.Context, p prefetchTask, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		started <- p.N
		select {
		case <-release:
		case <-ctx.Done():
		}
		return venturi.Completed(), nil
	}
	cfg := fastConfig()
	cfg.Concurrency = 2
	a := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegisterFunc(a, handle)
	startWorker(t, a)
	recv(t, started, "first handler of worker A")
	recv(t, started, "second handler of worker A")
	// A holds its 2 running jobs and at most 2 buffered ones; it claims nothing more
	// while its handlers block.
	held := func() int { return countJobs(t, pool, "state = 'running' AND worker_id = $1", a.ID()) }
	if n := held(); n > 4 {
		t.Fatalf("worker A holds %d jobs with 2 slots, want at most 4", n)
	}
	// Another worker gets the rest.
	cfg.ID = "worker-b"
	b := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegisterFunc(b, handle)
	startWorker(t, b)
	recv(t, started, "first handler of worker B")
	recv(t, started, "second handler of worker B")
	if n := held(); n > 4 {
		t.Fatalf("worker A holds %d jobs with 2 slots, want at most 4", n)
	}
	close(release)
	eventually(t, within, "40 jobs completed", func() bool {
		return countJobs(t, pool, "kind = 'prefetch' AND state = 'completed'") == n
	})
}

// An idle worker's poll is a deadline, not an interval restarted by every freed slot:
// while busy handlers keep finishing more often than PollInterval, a job that arrives
// without a notification (PollOnly) is still claimed at the next poll. (The fetch loop
// once re-armed the poll timer on every freed slot, so such a job waited for the stream
// of completions to stop.)
func TestIdlePollNotDeferredByFinishingHandlers(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	const blockers = 40
	enqueuePrefetch(t, q, blockers)
	release := make(chan struct{})
	started := make(chan int, blockers+1)
	cfg := fastConfig()
	cfg.Concurrency, cfg.Prefetch, cfg.PollOnly, cfg.PollInterval = blockers+1, -1, true, 200*time.Millisecond
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegisterFunc(w, func(ctx context.Context, p prefetchTask, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		started <- p.N
		if p.N < blockers {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return venturi.Completed(), nil
	})
	startWorker(t, w)
	for range blockers {
		recv(t, started, "a blocking handler")
	}
	// Every blocker runs; the last claim found nothing, so the worker is idle. The probe
	// arrives with no notification to wake it.
	enqueue(t, q, prefetchTask{N: blockers})
	// Free one slot every 50ms, four times per poll interval, until the probe starts.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	released := 0
	for {
		select {
		case n := <-started:
			if n != blockers {
				t.Fatalf("handler %d started twice", n)
			}
			t.Logf("probe started after %d of %d blockers finished", released, blockers)
			close(release)
			return
		case <-tick.C:
			if released == blockers {
				t.Fatalf("the probe did not start while handlers kept finishing: the idle poll was deferred by every freed slot")
			}
			release <- struct{}{}
			released++
		}
	}
}
