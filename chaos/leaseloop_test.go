// Regression test for a venturi bug the chaos run found (chaos/README.md, "Bugs found"),
// fixed in venturi c6fea28. It needs a database (make test/chaos runs it on the chaos
// cluster):
//
//	scripts/pg.sh with -- bash -c 'cd chaos && go test -run TestLeaseLoopCancelsSuccessor -count=1 -v .'
//
// The lease loop snapshotted (job, token) of the active runs, extended them in one
// statement, then matched the result by job ID only. When a run of job X ended while the
// statement was in flight and the same worker claimed X again (a retry with zero backoff,
// a PauseIn(0)), the old token was not returned, and the loop cancelled the *new* run
// with ErrLeaseLost. That run's result was discarded, the job stayed running until its
// lease expired, and the rescuer recorded an abandoned run (a failure, counted by the
// backstop) on a worker that never stopped. Before the fix this test failed in every run.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
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

// anchor is a long run whose row the test locks now and then, which holds the worker's
// ExtendLeases statement for 300ms: a deterministic version of a slow statement on a
// loaded server. Its ULID is the smallest, so the statement meets its row first.
type anchor struct{}

func (anchor) Kind() string               { return "chaos.anchor" }
func (anchor) Priority() venturi.Priority { return venturi.PriorityMax }

// anchorRelease is the current attempt's release channel, closed when the attempt ends.
var anchorRelease atomic.Pointer[chan struct{}]

func (anchor) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	select {
	case <-*anchorRelease.Load():
		return venturi.Completed(), nil
	case <-ctx.Done():
		return venturi.Outcome{}, context.Cause(ctx)
	}
}

func TestLeaseLoopCancelsSuccessor(t *testing.T) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	if dsn == "" {
		t.Fatal("set TEST_DATABASE_URL or DATABASE_URL (scripts/pg.sh with -- ...)")
	}
	// A run abandoned after a lease extension failed (the statement timed out on a
	// loaded machine: the worker fenced itself, as it must) says nothing about the bug, so
	// such an attempt is repeated on a fresh schema. Three inconclusive attempts fail the
	// test: a reproduction that cannot run is not a pass.
	const attempts = 3
	var why []string
	for i := range attempts {
		inconclusive := leaseLoopAttempt(t, dsn, i)
		if inconclusive == "" {
			return
		}
		t.Logf("attempt %d inconclusive: %s", i+1, inconclusive)
		why = append(why, inconclusive)
	}
	t.Fatalf("inconclusive in all %d attempts (%v): the machine is too loaded for this reproduction", attempts, why)
}

// leaseLoopAttempt runs the reproduction once. It fails t when a run was abandoned on a
// healthy worker, and returns why the attempt was inconclusive, or "" when it passed.
func leaseLoopAttempt(t *testing.T, dsn string, attempt int) string {
	t.Helper()
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
	// A connection per handler and some for the worker's loops: with the default pool (4
	// connections on 2 cores) the lease extension queued behind 49 finishing runs and timed
	// out under load, which made the attempt inconclusive.
	u, err := withParams(dsn, "search_path", schema, "pool_max_conns", "64")
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
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	if _, err := q.Enqueue(ctx, anchor{}); err != nil {
		t.Fatal(err)
	}
	var tasks []venturi.Task
	for i := range 48 {
		tasks = append(tasks, flappy{N: i})
	}
	if _, err := q.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	logs := &countingHandler{counts: map[string]int{}}
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		Concurrency:         49,
		Lease:               3 * time.Second, // extended every 1s; long enough that load cannot expire it
		MaintenanceInterval: 100 * time.Millisecond,
		PollInterval:        50 * time.Millisecond,
		Backoff:             venturi.Backoff{Base: time.Microsecond, Cap: time.Microsecond},
		JitterFraction:      -1,
		MaxFailures:         -1,
		Logger:              slog.New(logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	venturi.MustRegister[flappy](w)
	venturi.MustRegister[anchor](w)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	anchorRelease.Store(&release)
	defer w.Stop(context.Background())
	defer close(release)

	// Hold the anchor's row for 300ms every 400ms: each lease extension that starts
	// meanwhile waits, while the flappy jobs keep failing and being reclaimed.
	lockCtx, stopLocking := context.WithCancel(ctx)
	defer stopLocking()
	go func() {
		for lockCtx.Err() == nil {
			_ = pgx.BeginFunc(lockCtx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(lockCtx, `SELECT 1 FROM venturi_job WHERE kind = 'chaos.anchor' AND state = 'running' FOR UPDATE`); err != nil {
					return err
				}
				hold := time.NewTimer(300 * time.Millisecond)
				defer hold.Stop()
				select {
				case <-hold.C:
				case <-lockCtx.Done():
				}
				return nil
			})
			pause := time.NewTimer(100 * time.Millisecond)
			select {
			case <-pause.C:
			case <-lockCtx.Done():
			}
			pause.Stop()
		}
	}()

	// One healthy worker, fast handlers, leases extended three times per lease period:
	// no run may be abandoned. Poll until every job completed, or one was abandoned.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var done, abandoned int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'completed' AND kind = 'chaos.flappy'),
			(SELECT count(*) FROM venturi_job_all j, jsonb_array_elements(j.journal) e WHERE e->>'event' = 'abandoned')
			FROM venturi_job_all`).Scan(&done, &abandoned)
		if err != nil {
			t.Fatal(err)
		}
		if failed := logs.count("venturi: lease extension failed"); abandoned > 0 && failed > 0 {
			return fmt.Sprintf("attempt %d: %d run(s) abandoned after %d failed lease extension(s) (last: %s)",
				attempt+1, abandoned, failed, logs.lastErr("venturi: lease extension failed"))
		}
		if abandoned > 0 {
			var worker, note string
			_ = pool.QueryRow(ctx, `SELECT e->>'worker', e->>'note' FROM venturi_job_all j, jsonb_array_elements(j.journal) e
				WHERE e->>'event' = 'abandoned' LIMIT 1`).Scan(&worker, &note)
			t.Fatalf("%d run(s) abandoned on a live, healthy worker (%s: %q): the lease loop cancelled a successor run", abandoned, worker, note)
		}
		if done == len(tasks) { // the flappy jobs; the anchor completes at release
			return ""
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("deadline: %d of %d jobs completed", done, len(tasks))
		}
	}
}

// countingHandler counts the worker's log messages (and prints them with VENTURI_TEST_LOG).
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
	errs   map[string]string // message -> its last "err" attribute
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Message]++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			if h.errs == nil {
				h.errs = map[string]string{}
			}
			h.errs[r.Message] = a.Value.String()
		}
		return true
	})
	h.mu.Unlock()
	if os.Getenv("VENTURI_TEST_LOG") != "" && r.Level >= slog.LevelWarn {
		return slog.NewTextHandler(os.Stderr, nil).Handle(ctx, r)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}
func (h *countingHandler) lastErr(msg string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.errs[msg]
}
