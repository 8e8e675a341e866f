package venturi_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// newDB returns a pool on a fresh, migrated schema.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 20)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", within, what)
		case <-tick.C:
		}
	}
}

// jobState reads a job's state and journal.
func job(t *testing.T, q *venturi.Queue, r venturi.Result) *venturi.Job {
	t.Helper()
	j, err := q.Job(context.Background(), r.ID)
	if err != nil {
		t.Fatalf("read job %s: %v", r.ID, err)
	}
	return j
}

// waitState waits until the job reaches state.
func waitState(t *testing.T, q *venturi.Queue, r venturi.Result, state venturi.State) *venturi.Job {
	t.Helper()
	var j *venturi.Job
	eventually(t, 20*time.Second, "job "+r.ID.String()+" to be "+string(state), func() bool {
		j = job(t, q, r)
		return j.State == state
	})
	return j
}

// startWorker starts w and stops it when the test ends.
func startWorker[S any](t *testing.T, w *venturi.Worker[S]) {
	t.Helper()
	if err := w.Start(context.Background()); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

// newWorker builds a worker and fails the test if its configuration is refused.
func newWorker[S any](t testing.TB, pool *pgxpool.Pool, state S, cfg venturi.Config) *venturi.Worker[S] {
	t.Helper()
	w, err := venturi.NewWorker(pool, state, cfg)
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	return w
}

// newEmptyDB returns a pool on a fresh schema without venturi's tables.
func newEmptyDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return testdb.Pool(t, testdb.Schema(t), 20)
}
