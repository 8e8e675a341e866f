package fetcher_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/fetcher"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// within bounds every wait of these tests: the conditions they wait for come in
// milliseconds; the bound only keeps a broken fetcher from hanging the test.
const within = 30 * time.Second

// fakeExecutor is a fetcher.Executor with slots handler slots whose jobs run until the
// test calls done.
type fakeExecutor struct {
	t       *testing.T
	mu      sync.Mutex
	slots   int
	running int
	started chan *jobrun.Job // every started job
	freed   chan struct{}
}

func newFakeExecutor(t *testing.T, slots int) *fakeExecutor {
	return &fakeExecutor{t: t, slots: slots, started: make(chan *jobrun.Job, 1000), freed: make(chan struct{}, 1)}
}

func (e *fakeExecutor) Free() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.slots - e.running
}

func (e *fakeExecutor) Start(j *jobrun.Job) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running == e.slots {
		e.t.Errorf("Start(%s) with no free slot", j.ID)
	}
	e.running++
	e.started <- j
}

func (e *fakeExecutor) Freed() <-chan struct{} { return e.freed }

// done ends a running job: its slot frees.
func (e *fakeExecutor) done() {
	e.mu.Lock()
	e.running--
	e.mu.Unlock()
	select {
	case e.freed <- struct{}{}:
	default:
	}
}

// testBundle is a migrated schema, a run tracker and what a fetcher needs on them.
type testBundle struct {
	pool    *pgxpool.Pool
	tracker *jobrun.Tracker
	log     *slog.Logger
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 4)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	return &testBundle{pool: pool, log: log, tracker: jobrun.NewTracker(jobrun.TrackerConfig{
		Lease: time.Minute, Grace: time.Second, Logger: log,
		LeaseLost: errors.New("lease lost"), Stopped: errors.New("stopped"), TimedOut: errors.New("timed out"),
	})}
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// fetcher returns a fetcher of the default queue for kind "k" feeding exec (nil: Claim
// and Release only).
func (b *testBundle) fetcher(ctx context.Context, concurrency, prefetch int, exec fetcher.Executor) *fetcher.Fetcher {
	return fetcher.New(b.config(ctx, concurrency, prefetch, exec))
}

// config is the configuration of b.fetcher, for a test to change before fetcher.New.
func (b *testBundle) config(ctx context.Context, concurrency, prefetch int, exec fetcher.Executor) fetcher.Config {
	return fetcher.Config{
		WorkerID: "w1", Queue: venturi.DefaultQueue, Kinds: []string{"k"},
		Concurrency: concurrency, Prefetch: prefetch, PrefetchWait: time.Second, ClaimBatch: concurrency + prefetch,
		PollInterval: time.Second, Lease: time.Minute, IdleTxMs: "30000", PromoteBatch: 1000, DB: b.pool,
		Send: func(ctx context.Context, queue func(*pgx.Batch)) error {
			batch := &pgx.Batch{}
			queue(batch)
			return b.pool.SendBatch(ctx, batch).Close()
		},
		Executor: exec, Tracker: b.tracker, DBCtx: ctx, Logger: b.log,
	}
}

// enqueue inserts n available jobs of kind in the default queue.
func (b *testBundle) enqueue(t *testing.T, kind string, n int) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), `INSERT INTO venturi_job (id, kind, state, payload, run_at)
		SELECT gen_random_uuid(), $1, 'available', '{}', now() - interval '1 second' FROM generate_series(1, $2)`, kind, n); err != nil {
		t.Fatal(err)
	}
}

// count returns how many jobs of kind are in state.
func (b *testBundle) count(t *testing.T, kind, state string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM venturi_job WHERE kind = $1 AND state = $2::venturi_job_state`,
		kind, state).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// assertRunning checks that j's row is running under its token, leased by w1.
func (b *testBundle) assertRunning(t *testing.T, j *jobrun.Job) {
	t.Helper()
	var (
		state, worker string
		token         int64
	)
	if err := b.pool.QueryRow(context.Background(), `SELECT state::text, lease_token, worker_id FROM venturi_job WHERE id = $1`,
		pgtype.UUID{Bytes: j.ID, Valid: true}).Scan(&state, &token, &worker); err != nil {
		t.Fatal(err)
	}
	if state != "running" || token != j.Token || worker != "w1" {
		t.Fatalf("job %s is %s with token %d of %q, want running with token %d of w1", j.ID, state, token, worker, j.Token)
	}
}

// run runs f until the test ends, and returns a function that stops it and waits.
func run(t *testing.T, f *fetcher.Fetcher) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(within):
			t.Fatal("Run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestFetcherFeedsClaimedJobs: the fetcher claims the available jobs of its kinds and
// starts them as slots free, never more than the executor's slots at once; each started
// job is running in the table under the token it carries. Another kind's jobs stay.
func TestFetcherFeedsClaimedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 25
	b.enqueue(t, "k", n)
	b.enqueue(t, "other", 3)
	exec := newFakeExecutor(t, 4)
	stop := run(t, b.fetcher(context.Background(), 4, 4, exec))
	seen := map[[16]byte]bool{}
	for len(seen) < n {
		select {
		case j := <-exec.started:
			if seen[j.ID] {
				t.Fatalf("job %s started twice", j.ID)
			}
			seen[j.ID] = true
			if j.Kind != "k" || j.Queue != venturi.DefaultQueue || j.Stop == nil {
				t.Fatalf("started %+v", j)
			}
			b.assertRunning(t, j)
			exec.done()
		case <-time.After(within):
			t.Fatalf("%d of %d jobs started within %v", len(seen), n, within)
		}
	}
	stop()
	if got := b.count(t, "k", "running"); got != n {
		t.Fatalf("%d jobs of k running, want %d", got, n)
	}
	if got := b.count(t, "other", "available"); got != 3 {
		t.Fatalf("%d jobs of the other kind available, want 3", got)
	}
}

// TestFetcherWakesAtNextDueAfterFullClaim: a busy fetcher's claims do not ask when the
// next scheduled job is due; when one comes back empty, the fetcher asks before it goes
// idle, so a job scheduled a moment ahead starts when it is due, not at the poll interval
// (an hour here). The first claim is full (4 of 4), so the empty one after it did not ask.
func TestFetcherWakesAtNextDueAfterFullClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.enqueue(t, "k", 4)
	var scheduled pgtype.UUID
	if err := b.pool.QueryRow(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at)
		VALUES (gen_random_uuid(), 'k', 'scheduled', '{}', now() + interval '1 second') RETURNING id`).Scan(&scheduled); err != nil {
		t.Fatal(err)
	}
	exec := newFakeExecutor(t, 4)
	cfg := b.config(ctx, 4, 0, exec) // claims of 4
	cfg.PollInterval = time.Hour
	run(t, fetcher.New(cfg))
	for i := range 5 {
		select {
		case j := <-exec.started:
			if i == 4 && j.ID != scheduled.Bytes {
				t.Fatalf("the fifth job started is %s, want the scheduled %x", j.ID, scheduled.Bytes)
			}
			exec.done()
		case <-time.After(within):
			t.Fatalf("%d of 5 jobs started within %v (the scheduled one waits for the hour's poll?)", i, within)
		}
	}
}

// TestFetcherReleasesOnStop: when its context ends, the fetcher releases the jobs it
// holds and has not started (its buffer, a claim in flight): only the started ones stay
// running.
func TestFetcherReleasesOnStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueue(t, "k", 20)
	exec := newFakeExecutor(t, 2)
	stop := run(t, b.fetcher(context.Background(), 2, 8, exec))
	for range 2 {
		select {
		case <-exec.started:
		case <-time.After(within):
			t.Fatalf("no job started within %v", within)
		}
	}
	stop()
	if got := b.count(t, "k", "running"); got != 2 {
		t.Fatalf("%d jobs running after the fetcher stopped, want the 2 started", got)
	}
	if got := b.count(t, "k", "available"); got != 18 {
		t.Fatalf("%d jobs available after the fetcher stopped, want 18", got)
	}
	if got := len(b.tracker.Leased()); got != 2 {
		t.Fatalf("the tracker holds %d runs, want the 2 started", got)
	}
}

// TestFetcherClaim: Claim takes up to n jobs, adds them to the tracker and reports when
// the next scheduled job is due (only when asked to); Release returns them.
func TestFetcherClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.enqueue(t, "k", 5)
	if _, err := b.pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at)
		VALUES (gen_random_uuid(), 'k', 'scheduled', '{}', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	f := b.fetcher(ctx, 4, 4, nil)
	before := time.Now()
	r := f.Claim(3, true)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if len(r.Jobs) != 3 || r.Paused {
		t.Fatalf("claimed %d jobs (paused %v), want 3", len(r.Jobs), r.Paused)
	}
	for _, j := range r.Jobs {
		b.assertRunning(t, j)
	}
	if got := len(b.tracker.Leased()); got != 3 {
		t.Fatalf("the tracker holds %d runs, want 3", got)
	}
	if r.NextDue.Before(before.Add(50*time.Minute)) || r.NextDue.After(time.Now().Add(70*time.Minute)) {
		t.Fatalf("next due %v, want about an hour after %v", r.NextDue, before)
	}
	busy := f.Claim(2, false)
	if busy.Err != nil {
		t.Fatal(busy.Err)
	}
	if len(busy.Jobs) != 2 || !busy.NextDue.IsZero() {
		t.Fatalf("a claim that did not ask: %d jobs, next due %v; want 2 and none", len(busy.Jobs), busy.NextDue)
	}
	f.Release(append(r.Jobs, busy.Jobs...))
	if got := b.count(t, "k", "available"); got != 5 {
		t.Fatalf("%d jobs available after the release, want 5", got)
	}
	if got := len(b.tracker.Leased()); got != 0 {
		t.Fatalf("the tracker holds %d runs after the release, want none", got)
	}
}

// TestFetcherPausedQueueClaimsNothing: a claim from a paused queue takes nothing and
// reports the pause.
func TestFetcherPausedQueueClaimsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.enqueue(t, "k", 5)
	if err := dbsqlc.New().SetQueuePaused(ctx, b.pool, dbsqlc.SetQueuePausedParams{Name: venturi.DefaultQueue, Paused: true}); err != nil {
		t.Fatal(err)
	}
	f := b.fetcher(ctx, 4, 4, nil)
	for _, due := range []bool{true, false} { // the pause is reported whether or not the claim asks when a job is due
		r := f.Claim(10, due)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if !r.Paused || len(r.Jobs) != 0 {
			t.Fatalf("claimed %d jobs from a paused queue (paused %v, due %v), want none and paused", len(r.Jobs), r.Paused, due)
		}
	}
	if got := b.count(t, "k", "available"); got != 5 {
		t.Fatalf("%d jobs available, want 5", got)
	}
}

// TestFetcherClaimOrder: a claim hands its jobs over most urgent first, then by due time,
// then by ID, whatever order the database returned the rows in (the plain claim's UPDATE
// returns them unordered). The jobs are inserted in an order that matches none of those.
func TestFetcherClaimOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// name, priority, due (seconds ago), id's last byte
	rows := []struct {
		name     string
		priority int16
		ago      int
		id       byte
	}{
		{"low", -10, 50, 1}, {"normal-late", 0, 10, 2}, {"high", 10, 5, 3},
		{"normal-early-b", 0, 40, 9}, {"normal-early-a", 0, 40, 8}, {"critical", 20, 1, 4},
	}
	base := time.Now().Truncate(time.Second)
	for _, r := range rows {
		id := [16]byte{15: r.id}
		if _, err := b.pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, priority, run_at)
			VALUES ($1, 'k', 'available', jsonb_build_object('name', $2::text), $3, $4)`,
			pgtype.UUID{Bytes: id, Valid: true}, r.name, r.priority, base.Add(-time.Duration(r.ago)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	r := b.fetcher(ctx, 8, 0, nil).Claim(8, false)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	var got []string
	for _, j := range r.Jobs {
		var p struct{ Name string }
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Name)
	}
	want := []string{"critical", "high", "normal-early-a", "normal-early-b", "normal-late", "low"}
	if !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
}
