package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// gauge counts handlers running at once, and the most it has seen, per key.
type gauge struct {
	mu   sync.Mutex
	now  map[string]int
	peak map[string]int
	runs atomic.Int64
}

func newGauge() *gauge { return &gauge{now: map[string]int{}, peak: map[string]int{}} }

func (g *gauge) enter(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now[key]++
	g.peak[key] = max(g.peak[key], g.now[key])
	g.runs.Add(1)
}

func (g *gauge) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now[key]--
}

func (g *gauge) max(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak[key]
}

// flowState is the handlers' shared state: the gauge, and a gate that holds runs until
// the test releases them.
type flowState struct {
	g    *gauge
	hold chan struct{}
}

// slotted takes slot Key with Limit under Policy; its handler runs for Ms milliseconds
// (or until hold closes when Hold is set) and reports to the gauge under its slot key.
type slotted struct {
	N      int
	Key    string
	Limit  int
	Policy venturi.SlotPolicy
	Ms     int
	Hold   bool
}

func (slotted) Kind() string { return "slotted" }
func (s slotted) Slot() venturi.Slot {
	return venturi.Slot{Key: s.Key, Limit: s.Limit, Policy: s.Policy}
}
func (s slotted) Handle(ctx context.Context, run *venturi.Run[struct{}], st flowState) (venturi.Outcome, error) {
	st.g.enter(s.Key)
	defer st.g.leave(s.Key)
	if s.Hold {
		select {
		case <-st.hold:
		case <-run.Shutdown():
			return venturi.Outcome{}, errors.New("asked to stop")
		case <-ctx.Done():
			return venturi.Outcome{}, ctx.Err()
		}
	}
	select {
	case <-time.After(time.Duration(s.Ms) * time.Millisecond):
	case <-ctx.Done():
		return venturi.Outcome{}, ctx.Err()
	}
	return venturi.Completed(), nil
}

// startFlowWorkers starts n workers, each on its own pool, serving T.
func startFlowWorkers[T venturi.Handler[flowState, struct{}]](t *testing.T, pool *pgxpool.Pool, st flowState, n int, cfg venturi.Config) []*venturi.Worker[flowState] {
	t.Helper()
	var ws []*venturi.Worker[flowState]
	for i := range n {
		p := pool
		if i > 0 {
			var err error
			if p, err = pgxpool.NewWithConfig(context.Background(), pool.Config()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
		}
		c := cfg
		c.ID = fmt.Sprintf("flow-%d", i)
		ws = append(ws, startWorkerFor[T](t, p, st, c))
	}
	return ws
}

// runIntervals returns the (start, end) of every run in the jobs' journals, by key.
func runIntervals(t *testing.T, pool *pgxpool.Pool, q *venturi.Queue, key func(*venturi.Job) string) map[string][][2]time.Time {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT id FROM venturi_job_all`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []ulid.ULID
	for rows.Next() {
		var b [16]byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ulid.ULID(b))
	}
	out := map[string][][2]time.Time{}
	for _, id := range ids {
		j := jobByID(t, q, id)
		for _, e := range fullJournal(t, q, id) {
			if e.Run > 0 && !e.StartedAt.IsZero() {
				out[key(j)] = append(out[key(j)], [2]time.Time{e.StartedAt, e.At})
			}
		}
	}
	return out
}

// fmtIntervals lists intervals by start, relative to the first.
func fmtIntervals(iv [][2]time.Time) string {
	sort.Slice(iv, func(a, b int) bool { return iv[a][0].Before(iv[b][0]) })
	out := ""
	for _, x := range iv {
		out += fmt.Sprintf("\n  %v .. %v", x[0].Sub(iv[0][0]), x[1].Sub(iv[0][0]))
	}
	return out
}

// maxOverlap is the most intervals that contain one instant.
func maxOverlap(iv [][2]time.Time) int {
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for _, i := range iv {
		evs = append(evs, ev{i[0], 1}, ev{i[1], -1})
	}
	sort.Slice(evs, func(a, b int) bool {
		if evs[a].at.Equal(evs[b].at) {
			return evs[a].d < evs[b].d // an end before a start at the same instant
		}
		return evs[a].at.Before(evs[b].at)
	})
	n, peak := 0, 0
	for _, e := range evs {
		n += e.d
		peak = max(peak, n)
	}
	return peak
}

// TestSlotQueueLimitsRunningJobsAcrossWorkers: three workers, jobs of two slot keys with
// limits 2 and 1: no more run at once than the limit, by the handlers' own count and by
// the journal's run times, and every job completes.
func TestSlotQueueLimitsRunningJobsAcrossWorkers(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	var ids []ulid.ULID
	for i := range 24 {
		key, limit := "a", 2
		if i%3 == 0 {
			key, limit = "b", 1
		}
		ids = append(ids, enqueue(t, q, slotted{N: i, Key: key, Limit: limit, Ms: 15}).ID)
	}
	st := flowState{g: newGauge()}
	startFlowWorkers[slotted](t, pool, st, 3, fastConfig())
	for _, id := range ids {
		if j := waitFinished(t, q, id); j.State != venturi.StateCompleted {
			t.Fatalf("job %s ended %s: %s", id, j.State, eventsOf(j))
		}
	}
	if a, b := st.g.max("a"), st.g.max("b"); a > 2 || b > 1 || a < 1 {
		t.Fatalf("peak running: a %d (limit 2), b %d (limit 1)", a, b)
	}
	for key, iv := range runIntervals(t, pool, q, func(j *venturi.Job) string { return j.Slot.Key }) {
		limit := map[string]int{"a": 2, "b": 1}[key]
		if n := maxOverlap(iv); n > limit {
			t.Fatalf("slot %s: the journal shows %d runs at once (limit %d): %s", key, n, limit, fmtIntervals(iv))
		}
	}
}

// TestSlotDropIfRunning: a job that becomes runnable while its slot is full ends at once,
// cancelled, with a dropped entry naming the slot; it never runs.
func TestSlotDropIfRunning(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	first := enqueue(t, q, slotted{N: 1, Key: "k", Policy: venturi.SlotDropIfRunning, Hold: true})
	startFlowWorkers[slotted](t, pool, st, 2, fastConfig())
	waitState(t, q, first, venturi.StateRunning)
	second := enqueue(t, q, slotted{N: 2, Key: "k", Policy: venturi.SlotDropIfRunning})
	j := waitState(t, q, second, venturi.StateCancelled)
	if e := lastEntry(j); e.Event != venturi.EventDropped || j.RunCount != 0 || j.Failures != 0 {
		t.Fatalf("dropped job: %s %q, runs %d, failures %d", e.Event, e.Note, j.RunCount, j.Failures)
	}
	close(st.hold)
	waitState(t, q, first, venturi.StateCompleted)
	third := enqueue(t, q, slotted{N: 3, Key: "k", Policy: venturi.SlotDropIfRunning})
	waitState(t, q, third, venturi.StateCompleted) // the slot is free again
}

// TestSlotReplace: a newer job of a full slot asks the running one to stop; the running
// one sees Run.Shutdown, ends cancelled with a replaced entry and no failure, and the
// newer one runs.
func TestSlotReplace(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	old := enqueue(t, q, slotted{N: 1, Key: "doc/7", Policy: venturi.SlotReplace, Hold: true})
	startFlowWorkers[slotted](t, pool, st, 2, fastConfig())
	waitState(t, q, old, venturi.StateRunning)
	newer := enqueue(t, q, slotted{N: 2, Key: "doc/7", Policy: venturi.SlotReplace, Ms: 1})
	j := waitState(t, q, old, venturi.StateCancelled)
	if e := lastEntry(j); e.Event != venturi.EventReplaced || j.Failures != 0 {
		t.Fatalf("replaced job: %s %q, failures %d", e.Event, e.Note, j.Failures)
	}
	waitState(t, q, newer, venturi.StateCompleted)
	if n := st.g.max("doc/7"); n != 1 {
		t.Fatalf("%d runs of the slot at once", n)
	}
}

// stubborn ignores Run.Shutdown: a Replace must cancel its context after the grace.
type stubborn struct{ N int }

func (stubborn) Kind() string       { return "stubborn" }
func (stubborn) Slot() venturi.Slot { return venturi.Slot{Key: "s", Policy: venturi.SlotReplace} }
func (s stubborn) Handle(ctx context.Context, run *venturi.Run[struct{}], st flowState) (venturi.Outcome, error) {
	if s.N == 1 {
		<-ctx.Done()
		return venturi.Outcome{}, ctx.Err()
	}
	return venturi.Completed(), nil
}

// TestSlotReplaceCancelsAfterGrace: a run that ignores the stop signal is cancelled after
// the worker's ShutdownGrace and still ends replaced, not failed.
func TestSlotReplaceCancelsAfterGrace(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.ShutdownGrace = 100 * time.Millisecond
	startFlowWorkers[stubborn](t, pool, flowState{g: newGauge()}, 1, cfg)
	old := enqueue(t, q, stubborn{N: 1})
	waitState(t, q, old, venturi.StateRunning)
	newer := enqueue(t, q, stubborn{N: 2})
	if j := waitState(t, q, old, venturi.StateCancelled); lastEntry(j).Event != venturi.EventReplaced || j.Failures != 0 {
		t.Fatalf("old job: %s, failures %d", eventsOf(j), j.Failures)
	}
	waitState(t, q, newer, venturi.StateCompleted)
}

// limitedKind has a global concurrency of 2.
type limitedKind struct{ N int }

func (limitedKind) Kind() string { return "limited_kind" }
func (limitedKind) Limits() venturi.Limits {
	return venturi.Limits{Concurrency: 2}
}
func (l limitedKind) Handle(ctx context.Context, run *venturi.Run[struct{}], st flowState) (venturi.Outcome, error) {
	st.g.enter("kind")
	defer st.g.leave("kind")
	select { // the work being limited
	case <-time.After(10 * time.Millisecond):
	case <-ctx.Done():
	}
	return venturi.Completed(), nil
}

// TestKindConcurrencyAcrossWorkers: a kind's concurrency holds across three workers of
// four handlers each, including for jobs enqueued before its limits were recorded.
func TestKindConcurrencyAcrossWorkers(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	var ids []ulid.ULID
	for i := range 20 { // enqueued before any worker recorded the kind's limits: plain jobs
		ids = append(ids, enqueue(t, q, limitedKind{N: i}).ID)
	}
	if n := countJobs(t, pool, "part IS NULL"); n != 20 {
		t.Fatalf("%d plain jobs before the limits are known, want 20", n)
	}
	st := flowState{g: newGauge()}
	startFlowWorkers[limitedKind](t, pool, st, 3, fastConfig())
	for i := range 10 { // and after: gated at enqueue
		ids = append(ids, enqueue(t, q, limitedKind{N: 100 + i}).ID)
	}
	for _, id := range ids {
		waitFinished(t, q, id)
	}
	if n := st.g.max("kind"); n > 2 {
		t.Fatalf("%d jobs of the kind ran at once, limit 2", n)
	}
	if n := maxOverlap(runIntervals(t, pool, q, func(*venturi.Job) string { return "" })[""]); n > 2 {
		t.Fatalf("the journal shows %d runs at once, limit 2", n)
	}
}

// rated starts at most 3 times per 300ms per partition.
type rated struct {
	N    int
	Host string
}

func (rated) Kind() string        { return "rated" }
func (r rated) Partition() string { return r.Host }
func (rated) Limits() venturi.Limits {
	return venturi.Limits{Rate: venturi.Rate{N: 3, Per: 300 * time.Millisecond, PerPartition: true}}
}
func (r rated) Handle(ctx context.Context, run *venturi.Run[struct{}], st flowState) (venturi.Outcome, error) {
	st.g.enter(r.Host)
	st.g.leave(r.Host)
	return venturi.Completed(), nil
}

// TestRateLimitPerPartition: no window of the period holds more than N starts of one
// partition, by the journal's start times (the database clock), with two workers.
func TestRateLimitPerPartition(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := flowState{g: newGauge()}
	startFlowWorkers[rated](t, pool, st, 2, fastConfig())
	var ids []ulid.ULID
	for i := range 14 {
		ids = append(ids, enqueue(t, q, rated{N: i, Host: []string{"a.example", "b.example"}[i%2]}).ID)
	}
	for _, id := range ids {
		waitFinished(t, q, id)
	}
	for host, iv := range runIntervals(t, pool, q, func(j *venturi.Job) string { return j.Partition }) {
		starts := make([]time.Time, len(iv))
		for i, x := range iv {
			starts[i] = x[0]
		}
		sort.Slice(starts, func(a, b int) bool { return starts[a].Before(starts[b]) })
		for i := 3; i < len(starts); i++ {
			if d := starts[i].Sub(starts[i-3]); d < 300*time.Millisecond {
				t.Fatalf("%s: 4 starts within %v (rate 3 per 300ms): %v", host, d, starts[i-3:i+1])
			}
		}
	}
}

// flaky fails while the host is in the state's failing set.
type flaky struct {
	N    int
	Host string
}

type flakyState struct {
	failing sync.Map // host -> true
	runs    sync.Map // host -> *atomic.Int64
}

func (flaky) Kind() string        { return "flaky" }
func (f flaky) Partition() string { return f.Host }
func (flaky) Limits() venturi.Limits {
	return venturi.Limits{Breaker: venturi.Breaker{Failures: 2, Cooldown: 300 * time.Millisecond, PerPartition: true}}
}
func (f flaky) Handle(ctx context.Context, run *venturi.Run[struct{}], st *flakyState) (venturi.Outcome, error) {
	c, _ := st.runs.LoadOrStore(f.Host, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	if _, bad := st.failing.Load(f.Host); bad {
		return venturi.Outcome{}, venturi.RetryIn(time.Millisecond, errors.New("host is down"))
	}
	return venturi.Completed(), nil
}

// TestBreakerPerPartition: a failing host's breaker opens after two failures and stops
// its runs (without counting failures against the waiting job) while another host's
// jobs keep running; after the cooldown a probe runs, and once the host is healthy the
// probe closes the breaker and the waiting job completes.
func TestBreakerPerPartition(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := &flakyState{}
	st.failing.Store("bad", true)
	cfg := fastConfig()
	cfg.MaxFailures = 1000
	startWorkerFor[flaky](t, pool, st, cfg)
	bad := enqueue(t, q, flaky{N: 1, Host: "bad"})
	j := waitJob(t, q, bad.ID, "its breaker to open", func(j *venturi.Job) bool {
		return j.Circuit != nil && j.Circuit.State == venturi.CircuitOpen
	})
	if j.Circuit.Partition != "bad" || j.Circuit.Failures < 2 || j.State == venturi.StateDead {
		t.Fatalf("circuit %+v, job %s", *j.Circuit, j.State)
	}
	for i := range 5 { // another host is unaffected
		waitState(t, q, enqueue(t, q, flaky{N: 10 + i, Host: "good"}), venturi.StateCompleted)
	}
	circuits, err := q.Circuits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]venturi.CircuitState{}
	for _, c := range circuits {
		states[c.Partition] = c.State
	}
	if states["good"] != venturi.CircuitClosed {
		t.Fatalf("circuits: %v", states)
	}
	st.failing.Delete("bad")
	j = waitState(t, q, bad, venturi.StateCompleted) // the probe after the cooldown
	// The breaker hears of the probe's success right after its result is written.
	waitJob(t, q, bad.ID, "its breaker to close", func(j *venturi.Job) bool {
		return j.Circuit != nil && j.Circuit.State == venturi.CircuitClosed && j.Circuit.Failures == 0
	})
	// While the breaker was open, the job was not run: its failures are the failed runs.
	if runs := j.RunCount; runs != j.Failures+1 {
		t.Fatalf("runs %d, failures %d", runs, j.Failures)
	}
}

// fair records the order its jobs run in.
type fair struct {
	N      int
	Tenant string
}

func (fair) Kind() string        { return "fair" }
func (f fair) Partition() string { return f.Tenant }
func (f fair) Handle(ctx context.Context, run *venturi.Run[struct{}], order chan<- string) (venturi.Outcome, error) {
	order <- f.Tenant
	return venturi.Completed(), nil
}

// TestFairnessBetweenPartitions: with one tenant's 200 jobs enqueued first, another
// tenant's 5 jobs run within the first dozen runs, not after the flood.
func TestFairnessBetweenPartitions(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	flood := make([]venturi.Task, 200)
	for i := range flood {
		flood[i] = fair{N: i, Tenant: "big"}
	}
	if _, err := q.EnqueueMany(context.Background(), flood); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		enqueue(t, q, fair{N: i, Tenant: "small"})
	}
	order := make(chan string, 205)
	cfg := fastConfig()
	cfg.Concurrency, cfg.Prefetch = 1, -1
	startWorkerFor[fair](t, pool, (chan<- string)(order), cfg)
	small := 0
	for i := range 12 {
		if recv(t, order, fmt.Sprintf("run %d", i)) == "small" {
			small++
		}
	}
	if small != 5 {
		t.Fatalf("%d of the small tenant's 5 jobs ran in the first 12 runs", small)
	}
}

// queued runs in queue Q and reports its name.
type queued struct {
	Q    string
	Name string
}

func (queued) Kind() string    { return "queued" }
func (q queued) Queue() string { return q.Q }
func (q queued) Handle(ctx context.Context, run *venturi.Run[struct{}], seen chan<- string) (venturi.Outcome, error) {
	seen <- q.Name
	return venturi.Completed(), nil
}

// TestPauseQueueIsDurable: a paused queue starts nothing, across a worker restart, while
// another queue of the same worker keeps running; resume starts its jobs at once.
func TestPauseQueueIsDurable(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	if err := q.PauseQueue(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 10)
	cfg := fastConfig()
	cfg.Queues = []venturi.WorkerQueue{{Name: "slow"}, {Name: "fast"}}
	w := startWorkerFor[queued](t, pool, (chan<- string)(seen), cfg)
	paused := enqueue(t, q, queued{Q: "slow", Name: "paused"})
	enqueue(t, q, queued{Q: "fast", Name: "fast-1"})
	if got := recv(t, seen, "the fast queue's job"); got != "fast-1" {
		t.Fatalf("ran %q first", got)
	}
	stopWorker(t, w)
	w = startWorkerFor[queued](t, pool, (chan<- string)(seen), cfg)
	enqueue(t, q, queued{Q: "fast", Name: "fast-2"})
	if got := recv(t, seen, "the fast queue's job after the restart"); got != "fast-2" {
		t.Fatalf("ran %q", got)
	}
	if j := jobByID(t, q, paused.ID); j.State != venturi.StateAvailable || j.RunCount != 0 {
		t.Fatalf("job of the paused queue: %s, %d runs", j.State, j.RunCount)
	}
	states, err := q.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var slow *venturi.QueueState
	for i := range states {
		if states[i].Name == "slow" {
			slow = &states[i]
		}
	}
	if slow == nil || !slow.Paused || slow.Available != 1 {
		t.Fatalf("queues: %+v", states)
	}
	if err := q.ResumeQueue(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, seen, "the resumed queue's job"); got != "paused" {
		t.Fatalf("ran %q", got)
	}
	_ = w
}

// TestPauseReleasesPrefetchedJobs: jobs a worker holds in its buffer when the queue is
// paused go back to available instead of starting.
func TestPauseReleasesPrefetchedJobs(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	cfg := fastConfig()
	cfg.Concurrency = 1
	startFlowWorkers[slotted](t, pool, st, 1, cfg)
	first := enqueue(t, q, slotted{N: 0, Key: "x", Limit: 100, Hold: true})
	waitState(t, q, first, venturi.StateRunning)
	var rest []ulid.ULID
	for i := range 5 {
		rest = append(rest, enqueue(t, q, slotted{N: i + 1, Key: "x", Limit: 100}).ID)
	}
	eventually(t, within, "the worker to prefetch", func() bool { return countJobs(t, pool, "state = 'running'") > 1 })
	if err := q.PauseQueue(ctx, venturi.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	eventually(t, within, "the prefetched jobs to go back", func() bool { return countJobs(t, pool, "state = 'running'") == 1 })
	close(st.hold)
	waitState(t, q, first, venturi.StateCompleted)
	for _, id := range rest {
		if j := jobByID(t, q, id); j.State != venturi.StateAvailable {
			t.Fatalf("job %s is %s in a paused queue", id, j.State)
		}
	}
	if err := q.ResumeQueue(ctx, venturi.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	for _, id := range rest {
		waitFinished(t, q, id)
	}
}

// plainLimited is a plain job in queue "narrow".
type plainLimited struct{ N int }

func (plainLimited) Kind() string  { return "plain_limited" }
func (plainLimited) Queue() string { return "narrow" }
func (p plainLimited) Handle(ctx context.Context, run *venturi.Run[struct{}], st flowState) (venturi.Outcome, error) {
	st.g.enter("q")
	defer st.g.leave("q")
	select { // the work being limited
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
	}
	return venturi.Completed(), nil
}

// TestQueueConcurrencyAcrossWorkers: a queue's concurrency limit holds for plain jobs
// across two workers; removing it lets the plain claim take over again.
func TestQueueConcurrencyAcrossWorkers(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	if err := q.SetQueueConcurrency(ctx, "narrow", 1); err != nil {
		t.Fatal(err)
	}
	var ids []ulid.ULID
	for i := range 16 {
		ids = append(ids, enqueue(t, q, plainLimited{N: i}).ID)
	}
	st := flowState{g: newGauge()}
	cfg := fastConfig()
	cfg.Queue = "narrow"
	startFlowWorkers[plainLimited](t, pool, st, 2, cfg)
	for _, id := range ids {
		waitFinished(t, q, id)
	}
	if n := st.g.max("q"); n != 1 {
		t.Fatalf("%d jobs of the queue ran at once, limit 1", n)
	}
	if err := q.SetQueueConcurrency(ctx, "narrow", 0); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, q, enqueue(t, q, plainLimited{N: 99}).ID)
	if err := q.SetQueueConcurrency(ctx, "narrow", -1); err == nil {
		t.Fatal("a negative queue concurrency was accepted")
	}
}

// TestOnQueueOverridesTheTask: OnQueue at enqueue wins over the task's Queue method.
func TestOnQueueOverridesTheTask(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	r := enqueue(t, q, queued{Q: "a", Name: "x"}, venturi.OnQueue("b"))
	if j := jobByID(t, q, r.ID); j.Queue != "b" {
		t.Fatalf("queue %q, want b", j.Queue)
	}
	if _, err := q.Enqueue(context.Background(), queued{Q: "a"}, venturi.OnQueue(string([]byte{0xff}))); !errors.Is(err, venturi.ErrInvalidQueue) {
		t.Fatalf("invalid OnQueue: %v", err)
	}
	_ = pool
}

type badSlot struct{ S venturi.Slot }

func (badSlot) Kind() string         { return "bad_slot" }
func (b badSlot) Slot() venturi.Slot { return b.S }

type badPart struct{ P string }

func (badPart) Kind() string        { return "bad_part" }
func (b badPart) Partition() string { return b.P }

type badLimits struct{}

func (badLimits) Kind() string { return "bad_limits" }
func (badLimits) Limits() venturi.Limits {
	return venturi.Limits{Rate: venturi.Rate{N: 5}}
}
func (badLimits) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// TestFlowControlRefusesBadInput: invalid slots, partitions, limits and worker queues
// get clear errors and store nothing.
func TestFlowControlRefusesBadInput(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	for _, s := range []venturi.Slot{
		{Key: string(make([]byte, venturi.MaxSlotKeyBytes+1))}, {Key: "k", Limit: -1},
		{Key: "k", Policy: 7}, {Key: "a\x1fb"},
	} {
		if _, err := q.Enqueue(ctx, badSlot{s}); !errors.Is(err, venturi.ErrInvalidSlot) {
			t.Errorf("slot %+v: %v", s, err)
		}
	}
	for _, p := range []string{string(make([]byte, venturi.MaxPartitionBytes+1)), "\xff", "a\x00"} {
		if _, err := q.Enqueue(ctx, badPart{p}); !errors.Is(err, venturi.ErrInvalidPartition) {
			t.Errorf("partition %q: %v", p, err)
		}
	}
	if n := countJobs(t, pool, "true"); n != 0 {
		t.Fatalf("%d jobs stored", n)
	}
	w := newWorker(t, pool, struct{}{}, fastConfig())
	if err := venturi.Register[badLimits](w); err == nil {
		t.Error("a rate without a period was registered")
	}
	for _, cfg := range []venturi.Config{
		{Queue: "a", Queues: []venturi.WorkerQueue{{Name: "b"}}},
		{Queues: []venturi.WorkerQueue{{Name: "a"}, {Name: "a"}}},
		{Queues: []venturi.WorkerQueue{{Name: ""}}},
		{Queues: []venturi.WorkerQueue{{Name: "a", Concurrency: -1}}},
	} {
		if _, err := venturi.NewWorker(pool, struct{}{}, cfg); err == nil {
			t.Errorf("config %+v accepted", cfg.Queues)
		}
	}
}

// TestRateLimitedJobsStartWhenTheWindowFrees: a worker that neither polls (an hour) nor
// listens runs rate-limited jobs as the window frees: the claim tells it when.
func TestRateLimitedJobsStartWhenTheWindowFrees(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.PollOnly, cfg.PollInterval = true, time.Hour
	var ids []ulid.ULID
	for i := range 9 {
		ids = append(ids, enqueue(t, q, rated{N: i, Host: "one.example"}).ID)
	}
	startFlowWorkers[rated](t, pool, flowState{g: newGauge()}, 1, cfg)
	for _, id := range ids {
		waitFinished(t, q, id)
	}
}

// moving is a dedup task whose queue and partition come from its payload.
type moving struct {
	Q, Host string
}

func (moving) Kind() string                 { return "moving" }
func (m moving) Queue() string              { return m.Q }
func (m moving) Partition() string          { return m.Host }
func (m moving) DedupKey() venturi.DedupKey { return "k" }

// TestReplaceMovesTheJob: a Replace takes the new task's queue and partition, by the
// fast path (no merge method) and inside a transaction alike.
func TestReplaceMovesTheJob(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	first := enqueue(t, q, moving{Q: "imports", Host: "old.example"}, venturi.After(time.Hour))
	r := enqueue(t, q, moving{Q: "default", Host: "new.example"})
	if r.ID != first.ID || r.Action != venturi.ActionReplaced {
		t.Fatalf("second enqueue: %+v", r)
	}
	if j := jobByID(t, q, r.ID); j.Queue != "default" || j.Partition != "new.example" {
		t.Fatalf("after Replace: queue %q, partition %q", j.Queue, j.Partition)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := q.EnqueueTx(ctx, tx, moving{Q: "third", Host: "third.example"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if j := jobByID(t, q, r.ID); j.Queue != "third" || j.Partition != "third.example" {
		t.Fatalf("after Replace in a transaction: queue %q, partition %q", j.Queue, j.Partition)
	}
}
