package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// scripted opts in to the durable stream and walks its job through a failure (retry
// after 1ms), a pause, a wait for a signal and a completion.
type scripted struct {
	Name string `json:"name"`
}

func (scripted) Kind() string       { return "scripted" }
func (scripted) StreamEvents() bool { return true }

func (s scripted) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	switch run.RunCount() {
	case 1:
		return venturi.Outcome{}, venturi.RetryIn(time.Millisecond, errors.New("flaky"))
	case 2:
		return venturi.PauseInWith(0, "half way"), nil
	case 3:
		return venturi.WaitForSignal(time.Hour, "go"), nil
	}
	return venturi.CompletedWith("done"), nil
}

// plainEvt does not opt in.
type plainEvt struct{}

func (plainEvt) Kind() string { return "plain_evt" }
func (plainEvt) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// readAll reads the durable stream from after until it returns nothing, checking that
// every page resumes where the last ended.
func readAll(t *testing.T, q *venturi.Queue, after venturi.EventCursor) ([]venturi.JobEvent, venturi.EventCursor) {
	t.Helper()
	var all []venturi.JobEvent
	for {
		evs, next, err := q.Events(context.Background(), after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			if next != after {
				t.Fatalf("empty page moved the cursor from %q to %q", after, next)
			}
			return all, after
		}
		if next != evs[len(evs)-1].Cursor {
			t.Fatalf("cursor %q is not the last event's %q", next, evs[len(evs)-1].Cursor)
		}
		all, after = append(all, evs...), next
	}
}

func eventNames(evs []venturi.JobEvent, id ulid.ULID) string {
	var names []string
	for _, e := range evs {
		if e.JobID == id {
			names = append(names, string(e.Event))
		}
	}
	return strings.Join(names, " ")
}

func TestEventsOfAScriptedJobInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[scripted](w)
	venturi.MustRegister[plainEvt](w)
	sub := w.Subscribe(venturi.SubscribeConfig{Buffer: 64})
	defer sub.Close()
	startWorker(t, w)

	plain := enqueue(t, q, plainEvt{})
	r := enqueue(t, q, scripted{Name: "a"}, venturi.WithMeta(venturi.Meta{"tenant": "t1"}))
	waitState(t, q, r, venturi.StateWaiting)
	if _, err := q.Signal(ctx, r.ID, "go", nil, "d1"); err != nil {
		t.Fatal(err)
	}
	waitState(t, q, r, venturi.StateCompleted)
	waitState(t, q, plain, venturi.StateCompleted)

	want := "enqueued started failed started paused started waiting woken started completed"
	var evs []venturi.JobEvent
	eventually(t, within, "the durable stream to have every event", func() bool {
		evs, _ = readAll(t, q, "")
		return eventNames(evs, r.ID) == want
	})
	if got := eventNames(evs, plain.ID); got != "" {
		t.Fatalf("a job that did not opt in has events: %s", got)
	}
	for _, e := range evs {
		if e.Kind != "scripted" || e.Queue != venturi.DefaultQueue || e.At.IsZero() || e.Meta["tenant"] != "t1" {
			t.Fatalf("event %+v: want kind, queue, time and metadata", e)
		}
		switch e.Event {
		case venturi.EventFailed:
			if e.Delay != time.Millisecond || e.Note != "flaky" || e.Run != 1 || e.StartedAt.IsZero() {
				t.Fatalf("failed event %+v: want its retry delay, note, run and start", e)
			}
		case venturi.EventCompleted:
			if e.Run != 4 || e.State != venturi.StateCompleted || e.Note != "done" || e.Worker != w.ID() {
				t.Fatalf("completed event %+v", e)
			}
		}
	}

	// In process: the worker's own runs, in order.
	var got []string
	eventually(t, within, "the subscriber to have every run's events", func() bool {
		for {
			select {
			case e := <-sub.Events():
				if e.JobID == r.ID {
					got = append(got, string(e.Event))
				}
				continue
			default:
			}
			break
		}
		return len(got) >= 8
	})
	if s := strings.Join(got, " "); s != "started failed started paused started waiting started completed" {
		t.Fatalf("subscriber saw %q", s)
	}
	if sub.Dropped() != 0 {
		t.Fatalf("dropped %d", sub.Dropped())
	}
}

// TestEventsCursorSurvivesOutOfOrderCommits is the race a sequence-number cursor loses:
// transaction A writes an event and stays open, B writes one and commits, a reader reads,
// A commits, the reader resumes. It must see both events, each once.
func TestEventsCursorSurvivesOutOfOrderCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	for _, order := range []string{"A first", "B first"} {
		t.Run(order, func(t *testing.T) {
			start, err := q.EventsTail(ctx)
			if err != nil {
				t.Fatal(err)
			}
			txA, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer txA.Rollback(ctx)
			txB, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer txB.Rollback(ctx)
			first, second := txA, txB
			if order == "B first" { // B takes the lower transaction ID, A the lower sequence number
				first, second = txB, txA
			}
			if _, err := first.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
				t.Fatal(err)
			}
			if _, err := second.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
				t.Fatal(err)
			}
			a, err := q.EnqueueTx(ctx, txA, scripted{Name: "A"})
			if err != nil {
				t.Fatal(err)
			}
			b, err := q.EnqueueTx(ctx, txB, scripted{Name: "B"})
			if err != nil {
				t.Fatal(err)
			}
			if err := txB.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			seen, cur := readAll(t, q, start)
			for _, e := range seen {
				if e.JobID == a.ID {
					t.Fatal("read an event of a transaction that has not committed")
				}
			}
			if err := txA.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var more []venturi.JobEvent
			eventually(t, within, "both events", func() bool {
				evs, next := readAll(t, q, cur)
				more, cur = append(more, evs...), next
				all := append(slices.Clone(seen), more...)
				return eventNames(all, a.ID) != "" && eventNames(all, b.ID) != ""
			})
			all := append(seen, more...)
			if eventNames(all, a.ID) != "enqueued" || eventNames(all, b.ID) != "enqueued" {
				t.Fatalf("A: %q, B: %q; want each enqueued exactly once", eventNames(all, a.ID), eventNames(all, b.ID))
			}
		})
	}
}

// TestEventsConcurrentWritersMissNothingRepeatNothing reads the stream while writers
// commit in random order, resuming from the cursor every page.
func TestEventsConcurrentWritersMissNothingRepeatNothing(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	const writers, each = 6, 25
	var mu sync.Mutex
	var ids []ulid.ULID
	committed := make(chan struct{}) // a writer's commit, handed to one writer holding its transaction open
	done := make(chan struct{})
	go func() {
		defer close(done)
		concurrently(writers, func(i int) {
			for k := range each {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					r, err := q.EnqueueTx(ctx, tx, scripted{Name: fmt.Sprint(i, "/", k)})
					if err != nil {
						return err
					}
					if k%3 == i%3 { // hold some transactions open until another commits
						select {
						case <-committed:
						case <-time.After(time.Second):
						}
					}
					mu.Lock()
					ids = append(ids, r.ID)
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				select {
				case committed <- struct{}{}:
				default:
				}
			}
		})
	}()
	seen := map[ulid.ULID]int{}
	var cur venturi.EventCursor
	finished := false
	for !finished {
		select {
		case <-done:
			finished = true
		default:
		}
		evs, next := readAll(t, q, cur)
		cur = next
		for _, e := range evs {
			seen[e.JobID]++
		}
	}
	eventually(t, within, "every event", func() bool {
		evs, next := readAll(t, q, cur)
		cur = next
		for _, e := range evs {
			seen[e.JobID]++
		}
		return len(seen) == len(ids)
	})
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("job %s: %d enqueued events, want 1", id, seen[id])
		}
	}
}

func TestWaitEventsWakesOnCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q := newQueue(t)
	tail, err := q.EventsTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []venturi.JobEvent, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		evs, _, err := q.WaitEvents(wctx, tail, 10)
		if err != nil {
			t.Error(err)
		}
		got <- evs
	}()
	r := enqueue(t, q, scripted{Name: "w"})
	evs := recv(t, got, "WaitEvents")
	if len(evs) != 1 || evs[0].JobID != r.ID || evs[0].Event != venturi.EventEnqueued {
		t.Fatalf("WaitEvents = %+v", evs)
	}

	// A deadline with nothing to read returns the cursor unchanged.
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	last := evs[0].Cursor
	evs, next, err := q.WaitEvents(dctx, last, 10)
	if !errors.Is(err, context.DeadlineExceeded) || len(evs) != 0 || next != last {
		t.Fatalf("WaitEvents past the end = %v, %q, %v", evs, next, err)
	}
}

// TestWaitEventsHoldNoPoolConnection: many long polls at once on a Queue whose pool has
// two connections leave the pool to other work. The waiters share the Queue's one LISTEN
// connection (a connection of its own, outside the pool) and take a pool connection only
// to read the stream: while they all wait, the pool lends none out and other statements
// run; one commit wakes every waiter. Before, each waiter held a pool connection for its
// whole wait, so two waiters took the pool and every other statement waited.
func TestWaitEventsHoldNoPoolConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := schemaOf(newDB(t))
	pool := testdb.Pool(t, schema, 2)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	tail, err := q.EventsTail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 20
	got := make(chan []venturi.JobEvent, waiters)
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for range waiters {
		go func() {
			evs, _, err := q.WaitEvents(wctx, tail, 10)
			if err != nil {
				t.Error(err)
			}
			got <- evs
		}()
	}
	// Each waiter reads the stream twice before it waits (before and after it listens).
	eventually(t, within, "the waiters to wait, holding none of the pool's connections", func() bool {
		st := pool.Stat()
		return st.AcquireCount() >= 2*waiters+2 && st.AcquiredConns() == 0
	})
	// Other work is served while they wait.
	octx, ocancel := context.WithTimeout(ctx, within)
	defer ocancel()
	for range 10 {
		if _, _, err := q.Events(octx, tail, 10); err != nil {
			t.Fatalf("a read while %d waiters wait: %v", waiters, err)
		}
	}
	r := enqueue(t, q, scripted{Name: "w"})
	for range waiters {
		evs := recv(t, got, "a waiter")
		if len(evs) != 1 || evs[0].JobID != r.ID {
			t.Fatalf("WaitEvents = %+v", evs)
		}
	}
}

func TestEventCursorValidation(t *testing.T) {
	t.Parallel()
	_, q := newQueue(t)
	for _, bad := range []string{"x", "e1.", "e1.zz", "e1.1.-1", "e1.1.1.1", strings.Repeat("e1.1.", 20), "e2.1.1"} {
		if _, err := venturi.ParseEventCursor(bad); !errors.Is(err, venturi.ErrInvalidCursor) {
			t.Errorf("ParseEventCursor(%q) = %v, want ErrInvalidCursor", bad, err)
		}
		if _, _, err := q.Events(context.Background(), venturi.EventCursor(bad), 10); !errors.Is(err, venturi.ErrInvalidCursor) {
			t.Errorf("Events(%q) = %v, want ErrInvalidCursor", bad, err)
		}
	}
	if _, err := venturi.ParseEventCursor(""); err != nil {
		t.Fatal(err)
	}
}

// evtQuick completes at once.
type evtQuick struct{ N int }

func (evtQuick) Kind() string { return "evt_quick" }
func (evtQuick) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

func TestSubscriberThatNeverReadsDoesNotStallTheWorker(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[evtQuick](w)
	stuck := w.Subscribe(venturi.SubscribeConfig{Buffer: 1})
	defer stuck.Close()
	onlyDone := w.Subscribe(venturi.SubscribeConfig{Buffer: 1000, Events: []venturi.Event{venturi.EventCompleted}})
	defer onlyDone.Close()
	startWorker(t, w)
	const n = 40
	var rs []venturi.Result
	for i := range n {
		rs = append(rs, enqueue(t, q, evtQuick{N: i}))
	}
	for _, r := range rs {
		waitState(t, q, r, venturi.StateCompleted)
	}
	// 2n events (started, completed) went to a buffer of one that nobody read.
	eventually(t, within, "all drops counted", func() bool { return stuck.Dropped() == 2*n-1 })
	first := recv(t, stuck.Events(), "the buffered event")
	if first.Event != venturi.EventStarted {
		t.Fatalf("first event %+v", first)
	}
	// The next event finds room: the subscriber learns what it missed first.
	r := enqueue(t, q, evtQuick{N: n})
	waitState(t, q, r, venturi.StateCompleted)
	over := recv(t, stuck.Events(), "the overflow event")
	if over.Event != venturi.EventOverflow || over.Dropped != 2*n-1 {
		t.Fatalf("overflow event %+v, want Dropped %d", over, 2*n-1)
	}
	// The filtered subscriber got only completions, all of them.
	for range n + 1 {
		if e := recv(t, onlyDone.Events(), "a completion"); e.Event != venturi.EventCompleted {
			t.Fatalf("filtered subscriber got %+v", e)
		}
	}
	if onlyDone.Dropped() != 0 {
		t.Fatalf("filtered subscriber dropped %d", onlyDone.Dropped())
	}
}

func TestQueueSubscribeSeesItsEnqueues(t *testing.T) {
	t.Parallel()
	_, q := newQueue(t)
	sub := q.Subscribe(venturi.SubscribeConfig{})
	r := enqueue(t, q, plainEvt{}, venturi.OnQueue("other"), venturi.WithMeta(venturi.Meta{"k": "v"}))
	e := recv(t, sub.Events(), "the enqueue's event")
	if e.Event != venturi.EventEnqueued || e.JobID != r.ID || e.Queue != "other" || e.Meta["k"] != "v" {
		t.Fatalf("event %+v", e)
	}
	sub.Close()
	if _, ok := <-sub.Events(); ok {
		t.Fatal("channel open after Close")
	}
	sub.Close() // idempotent
}

// TestQueueSubscribeSeesMiddlewareMeta: the enqueued events a Queue's subscribers get
// carry the metadata the job got, enqueue middleware's keys included, for Enqueue and
// EnqueueMany alike.
func TestQueueSubscribeSeesMiddlewareMeta(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{
		func(ctx context.Context, info *venturi.EnqueueInfo, next func(context.Context) (venturi.Result, error)) (venturi.Result, error) {
			info.Meta["tenant"] = "t1"
			return next(ctx)
		},
	}})
	sub := q.Subscribe(venturi.SubscribeConfig{})
	defer sub.Close()
	r := enqueue(t, q, plainEvt{}, venturi.WithMeta(venturi.Meta{"k": "v"}))
	if e := recv(t, sub.Events(), "the enqueue's event"); e.JobID != r.ID || e.Meta["tenant"] != "t1" || e.Meta["k"] != "v" {
		t.Fatalf("Enqueue's event %+v: want the middleware's tenant and the option's k", e)
	}
	rs, err := q.EnqueueMany(context.Background(), []venturi.Task{plainEvt{}, plainEvt{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if e := recv(t, sub.Events(), "an EnqueueMany event"); e.JobID != r.ID || e.Meta["tenant"] != "t1" {
			t.Fatalf("EnqueueMany's event %+v: want the middleware's tenant", e)
		}
	}
	if j := jobByID(t, q, rs[1].ID); j.Meta["tenant"] != "t1" {
		t.Fatalf("stored meta %v", j.Meta)
	}
}

// ---- middleware ------------------------------------------------------------------------

type mwTask struct {
	Panic bool `json:"panic"`
}

func (mwTask) Kind() string { return "mw_task" }
func (m mwTask) Handle(ctx context.Context, run *venturi.Run[struct{}], log *mwLog) (venturi.Outcome, error) {
	log.add(fmt.Sprintf("handler meta=%s run.meta=%s", ctx.Value(mwKey{}), run.Meta()["trace"]))
	if m.Panic {
		panic("boom")
	}
	return venturi.Completed(), nil
}

type mwKey struct{}

type mwLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *mwLog) add(s string) { l.mu.Lock(); l.lines = append(l.lines, s); l.mu.Unlock() }
func (l *mwLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func TestMiddlewareOrderMetadataAndPanics(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	log := &mwLog{}
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{
		func(ctx context.Context, info *venturi.EnqueueInfo, next func(context.Context) (venturi.Result, error)) (venturi.Result, error) {
			log.add("enqueue outer " + info.Meta["tenant"])
			info.Meta["trace"] = "t-" + info.Kind
			r, err := next(ctx)
			log.add("enqueue outer done")
			return r, err
		},
		func(ctx context.Context, info *venturi.EnqueueInfo, next func(context.Context) (venturi.Result, error)) (venturi.Result, error) {
			log.add("enqueue inner " + info.Meta["trace"])
			return next(ctx)
		},
	}})
	cfg := fastConfig()
	cfg.MaxFailures = 1
	cfg.Middleware = []venturi.WorkMiddleware{
		func(ctx context.Context, job *venturi.JobInfo, next func(context.Context) (venturi.Outcome, error)) (venturi.Outcome, error) {
			log.add("work outer " + job.Kind)
			o, err := next(context.WithValue(ctx, mwKey{}, job.Meta["trace"]))
			log.add(fmt.Sprintf("work outer done err=%v", err != nil && strings.HasPrefix(err.Error(), "panic: boom")))
			return o, err
		},
		func(ctx context.Context, job *venturi.JobInfo, next func(context.Context) (venturi.Outcome, error)) (venturi.Outcome, error) {
			log.add(fmt.Sprintf("work inner run=%d queue=%s", job.Run, job.Queue))
			return next(ctx)
		},
	}
	startWorkerFor[mwTask](t, pool, log, cfg)

	r := enqueue(t, q, mwTask{}, venturi.WithMeta(venturi.Meta{"tenant": "acme"}))
	waitState(t, q, r, venturi.StateCompleted)
	want := []string{"enqueue outer acme", "enqueue inner t-mw_task", "enqueue outer done",
		"work outer mw_task", "work inner run=1 queue=default", "handler meta=t-mw_task run.meta=t-mw_task", "work outer done err=false"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("order:\n got %q\nwant %q", got, want)
	}
	if j := jobByID(t, q, r.ID); j.Meta["trace"] != "t-mw_task" || j.Meta["tenant"] != "acme" {
		t.Fatalf("Job.Meta = %v", j.Meta)
	}

	// A panicking handler still fails its run; middleware sees the panic as an error.
	p := enqueue(t, q, mwTask{Panic: true})
	j := waitState(t, q, p, venturi.StateDead)
	if !strings.HasPrefix(lastEntry(j).Note, "backstop reached after 1 failures: panic: boom") {
		t.Fatalf("note %q", lastEntry(j).Note)
	}
	if got := log.get(); got[len(got)-1] != "work outer done err=true" {
		t.Fatalf("middleware did not see the panic: %q", got)
	}
}

func TestPanickingWorkMiddlewareFailsTheRun(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	cfg := fastConfig()
	cfg.MaxFailures = 1
	cfg.Middleware = []venturi.WorkMiddleware{
		func(ctx context.Context, job *venturi.JobInfo, next func(context.Context) (venturi.Outcome, error)) (venturi.Outcome, error) {
			panic("middleware broke")
		},
	}
	startWorkerFor[mwTask](t, pool, &mwLog{}, cfg)
	r := enqueue(t, q, mwTask{})
	j := waitState(t, q, r, venturi.StateDead)
	if !strings.Contains(lastEntry(j).Note, "panic: middleware broke") {
		t.Fatalf("note %q", lastEntry(j).Note)
	}
}

func TestEnqueueMiddlewareRefusesAndMetaIsBounded(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	refuse := errors.New("no tenant")
	q := venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{
		func(ctx context.Context, info *venturi.EnqueueInfo, next func(context.Context) (venturi.Result, error)) (venturi.Result, error) {
			if info.Meta["tenant"] == "" {
				return venturi.Result{}, refuse
			}
			return next(ctx)
		},
	}})
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, plainEvt{}); !errors.Is(err, refuse) {
		t.Fatalf("Enqueue = %v", err)
	}
	if _, err := q.EnqueueMany(ctx, []venturi.Task{plainEvt{}}); !errors.Is(err, refuse) {
		t.Fatalf("EnqueueMany = %v", err)
	}
	rs, err := q.EnqueueMany(ctx, []venturi.Task{plainEvt{}, plainEvt{}}, venturi.WithMeta(venturi.Meta{"tenant": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if j := jobByID(t, q, rs[1].ID); j.Meta["tenant"] != "x" {
		t.Fatalf("EnqueueMany meta %v", j.Meta)
	}
	big := venturi.Meta{"tenant": "x", "blob": strings.Repeat("a", venturi.MaxMetaBytes)}
	if _, err := q.Enqueue(ctx, plainEvt{}, venturi.WithMeta(big)); !errors.Is(err, venturi.ErrMetaTooLarge) {
		t.Fatalf("large meta: %v", err)
	}
	if n := countJobs(t, pool, "true"); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}
