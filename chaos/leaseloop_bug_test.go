//go:build venturi_bugs

// Reproduction of a venturi bug found by the chaos run (see chaos/README.md, "Bugs
// found"). Run it on any throwaway database:
//
//	scripts/pg.sh with -- bash -c 'cd chaos && go test -tags venturi_bugs -run TestLeaseLoopCancelsSuccessor -count=1 -v .'
//
// The lease loop snapshots (job, token) of the active runs, extends them in one
// statement, then matches the result by job ID only. When a run of job X ends while the
// statement is in flight and the same worker claims X again (a retry with zero backoff, a
// PauseIn(0)), the old token is not returned, and the loop cancels the *new* run with
// ErrLeaseLost. That run's result is discarded, the job stays running until its lease
// expires, and the rescuer records an abandoned run (a failure, counted by the backstop)
// on a worker that never stopped.
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/venturi-dev/venturi"
)

type flappy struct {
	N int `json:"n"`
}

func (flappy) Kind() string { return "chaos.flappy" }

// Handle fails quickly until the 200th run: with zero backoff the same worker reclaims the
// job at once, again and again.
func (f flappy) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	t := time.NewTimer(time.Duration(2+f.N%8) * time.Millisecond) // simulated work
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return venturi.Outcome{}, context.Cause(ctx)
	}
	if run.RunCount() < 200 {
		return venturi.Outcome{}, errors.New("again")
	}
	return venturi.Completed(), nil
}

func TestLeaseLoopCancelsSuccessor(t *testing.T) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	if dsn == "" {
		t.Fatal("set TEST_DATABASE_URL or DATABASE_URL (scripts/pg.sh with -- ...)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const schema = "chaos_bug_leaseloop"
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	u, err := withParams(dsn, "search_path", schema)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var tasks []venturi.Task
	for i := range 48 {
		tasks = append(tasks, flappy{N: i})
	}
	if _, err := venturi.NewQueue(pool, nil).EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	w := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		Concurrency:         48,
		Lease:               1500 * time.Millisecond, // extended every 500ms
		MaintenanceInterval: 100 * time.Millisecond,
		PollInterval:        50 * time.Millisecond,
		Backoff:             venturi.Backoff{Base: time.Microsecond, Cap: time.Microsecond},
		JitterFraction:      -1,
		MaxFailures:         -1,
		Logger:              testLogger(),
	})
	venturi.Register[flappy](w)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())

	// One healthy worker, fast handlers, leases extended three times per lease period:
	// no run may be abandoned. Poll until every job completed, or one was abandoned.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var done, abandoned int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed'),
			(SELECT count(*) FROM venturi_job j, jsonb_array_elements(j.journal) e WHERE e->>'event' = 'abandoned')
			FROM venturi_job`).Scan(&done, &abandoned)
		if err != nil {
			t.Fatal(err)
		}
		if abandoned > 0 {
			var worker, note string
			_ = pool.QueryRow(ctx, `SELECT e->>'worker', e->>'note' FROM venturi_job j, jsonb_array_elements(j.journal) e
				WHERE e->>'event' = 'abandoned' LIMIT 1`).Scan(&worker, &note)
			t.Fatalf("%d run(s) abandoned on a live, healthy worker (%s: %q): the lease loop cancelled a successor run", abandoned, worker, note)
		}
		if done == len(tasks) {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("deadline: %d of %d jobs completed", done, len(tasks))
		}
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("VENTURI_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}
