package venturi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// within is the deadline of every condition wait in the integration tests: generous, so
// that a loaded two-core machine does not turn slowness into failures.
const within = 30 * time.Second

// fastConfig is a worker configuration that keeps tests quick: millisecond backoff,
// 50ms polling and 100ms maintenance. The lease stays long enough that a loaded machine
// cannot lose it by accident; tests about lease loss force it through SQL.
func fastConfig() venturi.Config {
	return venturi.Config{
		Concurrency:         4,
		Lease:               5 * time.Second,
		PollInterval:        50 * time.Millisecond,
		MaintenanceInterval: 100 * time.Millisecond,
		ShutdownGrace:       5 * time.Second,
		Backoff:             venturi.Backoff{Base: time.Millisecond, Cap: 50 * time.Millisecond},
		Logger:              testLogger(),
	}
}

// testLogger discards worker logs unless VENTURI_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("VENTURI_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// countJobs counts venturi_job rows matching the SQL condition where.
func countJobs(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM venturi_job WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatalf("count jobs where %s: %v", where, err)
	}
	return n
}

// idWhere returns the ID of the only job matching the SQL condition where.
func idWhere(t *testing.T, pool *pgxpool.Pool, where string, args ...any) ulid.ULID {
	t.Helper()
	var u pgtype.UUID
	if err := pool.QueryRow(context.Background(), "SELECT id FROM venturi_job WHERE "+where, args...).Scan(&u); err != nil {
		t.Fatalf("job where %s: %v", where, err)
	}
	return ulid.ULID(u.Bytes)
}

// jobByID reads a job through the public API.
func jobByID(t *testing.T, q *venturi.Queue, id ulid.ULID) *venturi.Job {
	t.Helper()
	j, err := q.Job(context.Background(), id)
	if err != nil {
		t.Fatalf("read job %s: %v", id, err)
	}
	return j
}

// waitJob waits until cond holds for the job and returns it.
func waitJob(t *testing.T, q *venturi.Queue, id ulid.ULID, what string, cond func(*venturi.Job) bool) *venturi.Job {
	t.Helper()
	var j *venturi.Job
	eventually(t, within, "job "+id.String()+": "+what, func() bool {
		j = jobByID(t, q, id)
		return cond(j)
	})
	return j
}

// eventsOf lists a job's journal events, comma-separated.
func eventsOf(j *venturi.Job) string {
	s := make([]string, len(j.Journal))
	for i, e := range j.Journal {
		s[i] = string(e.Event)
	}
	return strings.Join(s, ",")
}

// recv waits for a value on ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
	var zero T
	return zero
}

// completeNotes enqueues n note tasks and waits until each has completed: proof that a
// worker on q's database still runs jobs.
func completeNotes(t *testing.T, q *venturi.Queue, n int) {
	t.Helper()
	var rs []venturi.Result
	for i := range n {
		r, err := q.Enqueue(context.Background(), noteTask{Msg: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	for _, r := range rs {
		waitState(t, q, r, venturi.StateCompleted)
	}
}

// stopWorker stops w and fails the test if it does not stop cleanly.
func stopWorker[S any](t *testing.T, w *venturi.Worker[S]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("stop worker: %v", err)
	}
}

// decodeCarry unmarshals a job's stored carry into v; a NULL carry leaves v untouched.
func decodeCarry(t *testing.T, j *venturi.Job, v any) {
	t.Helper()
	if len(j.Carry) == 0 {
		return
	}
	if err := json.Unmarshal(j.Carry, v); err != nil {
		t.Fatalf("decode carry %s: %v", j.Carry, err)
	}
}

// decodePayload unmarshals a job's payload into v.
func decodePayload(t *testing.T, j *venturi.Job, v any) {
	t.Helper()
	if err := json.Unmarshal(j.Payload, v); err != nil {
		t.Fatalf("decode payload %s: %v", j.Payload, err)
	}
}

// carryIsZero reports whether a stored carry is the zero value (NULL or JSON null).
func carryIsZero(c json.RawMessage) bool {
	return len(c) == 0 || string(c) == "null"
}
