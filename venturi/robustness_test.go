package venturi_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
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
	pool := newDB(t)
	small := newPoolOn(t, pool, 2)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	app := &hogApp{pool: small, release: make(chan struct{})}
	w := newWorker(t, small, app, venturi.Config{Concurrency: 4, Lease: time.Second, MaintenanceInterval: 100 * time.Millisecond})
	venturi.MustRegister[hogTask](w)
	startWorker(t, w)
	for i := range 4 {
		if _, err := q.Enqueue(context.Background(), hogTask{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 20*time.Second, "handlers to hold the whole pool", func() bool { return app.holding.Load() == 2 })
	// Four distinct lease expiries = three extensions while the pool was exhausted.
	seen := map[time.Time]bool{}
	eventually(t, 30*time.Second, "leases to be extended three times", func() bool {
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
		`SELECT count(*) FROM venturi_job, jsonb_array_elements(journal) e WHERE e->>'event' = 'abandoned'`).Scan(&abandoned); err != nil {
		t.Fatal(err)
	}
	if abandoned != 0 {
		t.Fatalf("%d runs were rescued although their worker was alive", abandoned)
	}
	close(app.release)
	eventually(t, 30*time.Second, "all hog jobs to complete", func() bool { return countState(t, pool, "completed") == 4 })
}

func newPoolOn(t *testing.T, like *pgxpool.Pool, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg := like.Config()
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func countState(t *testing.T, pool *pgxpool.Pool, state string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM venturi_job WHERE state = $1::venturi_job_state`, state).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	w := newWorker(t, pool, struct{}{}, venturi.Config{PollInterval: 200 * time.Millisecond})
	venturi.MustRegister[quickTask](w)
	startWorker(t, w)
	listeners := func() int {
		var n int
		_ = pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN "venturi_insert.%' AND pid <> pg_backend_pid()`).Scan(&n)
		return n
	}
	eventually(t, 20*time.Second, "the listener to connect", func() bool { return listeners() > 0 })
	if _, err := pool.Exec(context.Background(),
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN "venturi_insert.%' AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		r, err := q.Enqueue(context.Background(), quickTask{N: i})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, q, r, venturi.StateCompleted)
	}
}

// TestGracefulShutdownUnderLoad: a worker stopped in the middle of a backlog leaves no
// job running or lost; a second worker finishes the rest; each job completes exactly once.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	tasks := make([]venturi.Task, 400)
	for i := range tasks {
		tasks[i] = quickTask{N: i}
	}
	if _, err := q.EnqueueMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	w1 := newWorker(t, pool, struct{}{}, venturi.Config{Concurrency: 20, ShutdownGrace: 50 * time.Millisecond})
	venturi.MustRegister[quickTask](w1)
	if err := w1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "some jobs to complete", func() bool { return countState(t, pool, "completed") >= 50 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countState(t, pool, "running"); n != 0 {
		t.Fatalf("%d jobs still running after Stop", n)
	}
	w2 := newWorker(t, pool, struct{}{}, venturi.Config{})
	venturi.MustRegister[quickTask](w2)
	startWorker(t, w2)
	eventually(t, 60*time.Second, "every job to complete", func() bool { return countState(t, pool, "completed") == len(tasks) })
	var multi int
	if err := pool.QueryRow(context.Background(), `
		SELECT count(*) FROM venturi_job
		WHERE (SELECT count(*) FROM jsonb_array_elements(journal) e WHERE e->>'event' = 'completed') <> 1`).Scan(&multi); err != nil {
		t.Fatal(err)
	}
	if multi != 0 {
		t.Fatal(fmt.Sprintf("%d jobs do not have exactly one completed entry", multi))
	}
}
