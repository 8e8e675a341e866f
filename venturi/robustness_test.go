package venturi_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// hogTask holds a connection of the application's pool until released.
type hogTask struct{ N int }

func (hogTask) Kind() string { return "hog" }

type hogApp struct {
	pool    *pgxpool.Pool
	release chan struct{}
	holding atomic.Int32
}

func (h hogTask) Handle(ctx context.Context, run *venturi.Run[struct{}], app *hogApp) (venturi.Outcome, error) {
	conn, err := app.pool.Acquire(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	defer conn.Release()
	app.holding.Add(1)
	select {
	case <-app.release:
	case <-ctx.Done():
		return venturi.Outcome{}, ctx.Err()
	}
	return venturi.Completed(), nil
}

// TestExhaustedPoolDoesNotStopLeaseExtension: handlers hold every connection of the
// application's pool, yet leases keep being extended (the worker has its own
// connections) and no run is rescued.
func TestExhaustedPoolDoesNotStopLeaseExtension(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	small := testdb.Pool(t, schemaOf(pool), 2)
	app := &hogApp{pool: small, release: make(chan struct{})}
	startWorkerFor[hogTask](t, small, app, venturi.Config{Concurrency: 4, Lease: time.Second, MaintenanceInterval: 100 * time.Millisecond})
	for i := range 4 {
		enqueue(t, q, hogTask{N: i})
	}
	eventually(t, within, "handlers to hold the whole pool", func() bool { return app.holding.Load() == 2 })
	// Four distinct lease expiries = three extensions while the pool was exhausted.
	seen := map[time.Time]bool{}
	eventually(t, within, "leases to be extended three times", func() bool {
		var exp time.Time
		err := pool.QueryRow(context.Background(),
			`SELECT max(lease_expires_at) FROM venturi_job WHERE state = 'running'`).Scan(&exp)
		if err == nil {
			seen[exp] = true
		}
		return len(seen) >= 4
	})
	var abandoned int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM venturi_job_all, jsonb_array_elements(journal) e WHERE e->>'event' = 'abandoned'`).Scan(&abandoned); err != nil {
		t.Fatal(err)
	}
	if abandoned != 0 {
		t.Fatalf("%d runs were rescued although their worker was alive", abandoned)
	}
	close(app.release)
	eventually(t, within, "all hog jobs to complete", func() bool { return countJobs(t, pool, "state = 'completed'") == 4 })
}

type quickTask struct{ N int }

func (quickTask) Kind() string { return "quick" }

func (quickTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	select {
	case <-time.After(2 * time.Millisecond): // a little work
	case <-ctx.Done():
		return venturi.Outcome{}, ctx.Err()
	}
	return venturi.Completed(), nil
}

// TestListenerConnectionKilled: the worker's LISTEN connection is terminated by the
// server; jobs keep flowing (polling, then a reconnected listener).
func TestListenerConnectionKilled(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	startWorkerFor[quickTask](t, pool, struct{}{}, venturi.Config{PollInterval: 200 * time.Millisecond})
	// Only this test's listener: its channel is named after the test's schema, so tests
	// running in parallel keep theirs.
	ownListener := `FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
		AND query = 'LISTEN "venturi_insert.' || current_schema() || '"'`
	eventually(t, within, "the listener to connect", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) `+ownListener).Scan(&n)
		return n > 0
	})
	var killed int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) `+ownListener).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("terminated %d listener connections, want the worker's one", killed)
	}
	for i := range 20 {
		r := enqueue(t, q, quickTask{N: i})
		waitState(t, q, r, venturi.StateCompleted)
	}
}

// TestGracefulShutdownUnderLoad: a worker stopped in the middle of a backlog leaves no
// job running or lost; a second worker finishes the rest; each job completes exactly once.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	tasks := make([]venturi.Task, 400)
	for i := range tasks {
		tasks[i] = quickTask{N: i}
	}
	if _, err := q.EnqueueMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	w1 := startWorkerFor[quickTask](t, pool, struct{}{}, venturi.Config{Concurrency: 20, ShutdownGrace: 50 * time.Millisecond})
	eventually(t, within, "some jobs to complete", func() bool { return countJobs(t, pool, "state = 'completed'") >= 50 })
	stopWorker(t, w1)
	if n := countJobs(t, pool, "state = 'running'"); n != 0 {
		t.Fatalf("%d jobs still running after Stop", n)
	}
	startWorkerFor[quickTask](t, pool, struct{}{}, venturi.Config{})
	eventually(t, 60*time.Second, "every job to complete", func() bool { return countJobs(t, pool, "state = 'completed'") == len(tasks) })
	var multi int
	if err := pool.QueryRow(context.Background(), `
		SELECT count(*) FROM venturi_job_all
		WHERE (SELECT count(*) FROM jsonb_array_elements(journal) e WHERE e->>'event' = 'completed') <> 1`).Scan(&multi); err != nil {
		t.Fatal(err)
	}
	if multi != 0 {
		t.Fatalf("%d jobs do not have exactly one completed entry", multi)
	}
}
