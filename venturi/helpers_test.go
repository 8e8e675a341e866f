package venturi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/tcpproxy"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// within is the deadline of every condition wait in the integration tests: generous, so
// that a loaded two-core machine (and tests running in parallel) does not turn slowness
// into failures.
const within = 30 * time.Second

// ---- database and queue ----------------------------------------------------------------

// newDB returns a pool on a fresh, migrated schema. Every test gets its own schema, which
// is what lets the integration tests run in parallel.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 20)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool
}

// newQueue returns a pool on a fresh, migrated schema and a Queue on it.
func newQueue(t *testing.T) (*pgxpool.Pool, *venturi.Queue) {
	t.Helper()
	pool := newDB(t)
	return pool, venturi.NewQueue(pool, venturi.QueueConfig{})
}

// schemaOf returns the schema a pool works in (its search_path).
func schemaOf(pool *pgxpool.Pool) string {
	return pool.Config().ConnConfig.RuntimeParams["search_path"]
}

// enqueue enqueues task and fails the test if the enqueue is refused.
func enqueue(t *testing.T, q *venturi.Queue, task venturi.Task, opts ...venturi.EnqueueOption) venturi.Result {
	t.Helper()
	r, err := q.Enqueue(context.Background(), task, opts...)
	if err != nil {
		t.Fatalf("enqueue %T %+v: %v", task, task, err)
	}
	return r
}

// countJobs counts the jobs, pending or finished (venturi_job_all), matching the SQL
// condition where.
func countJobs(t *testing.T, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM venturi_job_all WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatalf("count jobs where %s: %v", where, err)
	}
	return n
}

// idWhere returns the ID of the only job matching the SQL condition where.
func idWhere(t *testing.T, pool *pgxpool.Pool, where string, args ...any) ulid.ULID {
	t.Helper()
	var u pgtype.UUID
	if err := pool.QueryRow(context.Background(), "SELECT id FROM venturi_job_all WHERE "+where, args...).Scan(&u); err != nil {
		t.Fatalf("job where %s: %v", where, err)
	}
	return ulid.ULID(u.Bytes)
}

// ---- workers -----------------------------------------------------------------------------

// fastConfig is a worker configuration that keeps tests quick: millisecond backoff,
// 50ms polling and 100ms maintenance. The lease stays long enough that a loaded machine
// cannot lose it by accident; tests about lease loss force it through SQL.
func fastConfig() venturi.Config {
	return venturi.Config{
		// An hour of retention: a handful of history partitions, not the defaults' thirty
		// (each test schema's first worker creates them).
		RetainCompleted:     time.Hour,
		RetainDead:          time.Hour,
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

// newWorker builds a worker and fails the test if its configuration is refused.
func newWorker[S any](t testing.TB, pool *pgxpool.Pool, state S, cfg venturi.Config) *venturi.Worker[S] {
	t.Helper()
	w, err := venturi.NewWorker(pool, state, cfg)
	if err != nil {
		t.Fatalf("new worker: %v", err)
	}
	return w
}

// startWorker starts w and stops it when the test ends.
func startWorker[S any](t *testing.T, w *venturi.Worker[S]) {
	t.Helper()
	if err := w.Start(context.Background()); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

// startWorkerFor builds a worker with state and cfg, registers the task type T on it and
// starts it; it stops when the test ends.
func startWorkerFor[T venturi.Handler[S, C], S, C any](t *testing.T, pool *pgxpool.Pool, state S, cfg venturi.Config) *venturi.Worker[S] {
	t.Helper()
	w := newWorker(t, pool, state, cfg)
	venturi.MustRegister[T](w)
	startWorker(t, w)
	return w
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

// completeNotes enqueues n note tasks and waits until each has completed: proof that a
// worker on q's database still runs jobs.
func completeNotes(t *testing.T, q *venturi.Queue, n int) {
	t.Helper()
	var rs []venturi.Result
	for i := range n {
		rs = append(rs, enqueue(t, q, noteTask{Msg: fmt.Sprint(i)}))
	}
	for _, r := range rs {
		waitState(t, q, r, venturi.StateCompleted)
	}
}

// ---- waiting -----------------------------------------------------------------------------

// slow marks a test that takes seconds (other processes, outages, leases that must run
// out, bursts, several workers; 4.5 s or more among eight at once): go test -short (make
// test/quick) skips it; make test runs it.
func slow(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow: make test runs it; -short (make test/quick) skips it")
	}
}

// eventuallyOK polls cond until it holds (true) or within passes (false), for a caller
// that reports more than eventually's message when it does not.
func eventuallyOK(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
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

// waitState waits until the job reaches state and returns it.
func waitState(t *testing.T, q *venturi.Queue, r venturi.Result, state venturi.State) *venturi.Job {
	t.Helper()
	return waitJob(t, q, r.ID, "to be "+string(state), func(j *venturi.Job) bool { return j.State == state })
}

// waitFinished waits until the job is completed or dead and returns it.
func waitFinished(t *testing.T, q *venturi.Queue, id ulid.ULID) *venturi.Job {
	t.Helper()
	return waitJob(t, q, id, "completed or dead", func(j *venturi.Job) bool {
		return j.State == venturi.StateCompleted || j.State == venturi.StateDead
	})
}

// concurrently runs f(0), …, f(n-1) in n goroutines released together, and waits for
// them all.
func concurrently(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// ---- reading jobs ------------------------------------------------------------------------

// eventsOf lists a job's journal events, comma-separated.
func eventsOf(j *venturi.Job) string {
	s := make([]string, len(j.Journal))
	for i, e := range j.Journal {
		s[i] = string(e.Event)
	}
	return strings.Join(s, ",")
}

// fullJournal reads job id's whole kept journal, oldest first, paging with Queue.Journal.
func fullJournal(t *testing.T, q *venturi.Queue, id ulid.ULID) []venturi.JournalEntry {
	t.Helper()
	var all []venturi.JournalEntry
	for before := int64(0); ; {
		page, err := q.Journal(context.Background(), id, before, 50)
		if err != nil {
			t.Fatalf("journal of %s: %v", id, err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(page, all...)
		before = page[0].Seq
	}
}

// lastEntry returns a job's last journal entry, or the zero entry for an empty journal.
func lastEntry(j *venturi.Job) venturi.JournalEntry {
	if len(j.Journal) == 0 {
		return venturi.JournalEntry{}
	}
	return j.Journal[len(j.Journal)-1]
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

// newEmptyDB returns a pool on a fresh schema without venturi's tables.
func newEmptyDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return testdb.Pool(t, testdb.Schema(t), 20)
}

// proxiedPool opens a pool on direct's schema that reaches PostgreSQL through a test proxy
// (internal/tcpproxy), for tests of network faults and outages; both close when the test
// ends.
func proxiedPool(t *testing.T, direct *pgxpool.Pool) (*pgxpool.Pool, *tcpproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, cfg.ConnConfig.Host+":"+strconv.Itoa(int(cfg.ConnConfig.Port)))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.Addr().Port)
	cfg.ConnConfig.RuntimeParams["search_path"] = direct.Config().ConnConfig.RuntimeParams["search_path"]
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, proxy
}
