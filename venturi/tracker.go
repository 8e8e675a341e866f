package venturi

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
)

// claimed is a job as a claim returned it.
type claimed struct {
	id           ulid.ULID
	kind         string
	queue        string // the queue it was claimed from
	meta         []byte // its metadata column (nil or JSON null: none; "?": not read yet)
	metaMap      Meta   // meta decoded, set before its run starts
	payload      []byte
	carry        []byte
	runs         int
	failures     int
	token        int64
	journal      []byte                // the journal's recent entries, as stored in the row
	journalMoved int64                 // entries moved out of the row before them
	started      time.Time             // attempted_at: the claim's database time
	due          time.Time             // run_at when claimed: the job's due time (database clock)
	sent         time.Time             // local clock when the claim was sent: the lease runs from here at the latest
	received     time.Time             // local clock when the claim's rows arrived: the run's duration runs from here
	breaker      string                // the breaker the run reports to ("": none)
	gated        bool                  // claimed by the gated claim: finishing it may free a gate
	stop         *runStop              // the run's stop signal (Run.Shutdown)
	stopEvent    atomic.Pointer[Event] // set when the run was asked to stop: EventReplaced or EventCancelled
}

// runStop is one run's stop signal: closed when the worker shuts down, or when the run is
// asked to stop (a newer job of its slot replaces it, or its job is cancelled).
type runStop struct {
	once sync.Once
	ch   chan struct{}
}

func newRunStop() *runStop { return &runStop{ch: make(chan struct{})} }

func (s *runStop) close() { s.once.Do(func() { close(s.ch) }) }

// activeRun is a claimed job whose result is not yet durable.
type activeRun struct {
	job      *claimed
	cancel   context.CancelCauseFunc // nil while the job waits in the prefetch buffer
	deadline time.Time               // local monotonic estimate of the lease's expiry
	finished bool                    // the handler returned; its result is being written
	writing  bool                    // a statement writing its result is in flight: not extended
	started  time.Time               // local clock when the handler started, for JobTimeout
	untimed  bool                    // JobTimeout does not apply (a singleton service)
}

// runTracker alone owns the set of claimed jobs whose result is not yet durable: the
// fetcher adds them, the executor starts and ends them, the lease extender and the
// finisher consult it, and Stop asks it for runs that ignore cancellation. A job may be
// claimed again under a new token while a stale entry for it is still here; every method
// matches the *claimed, not only the ID.
type runTracker struct {
	lease time.Duration
	grace time.Duration // how long a replaced run has after its stop signal
	log   *slog.Logger

	mu     sync.Mutex
	active map[ulid.ULID]*activeRun
}

func newRunTracker(lease, grace time.Duration, log *slog.Logger) *runTracker {
	return &runTracker{lease: lease, grace: grace, log: log, active: map[ulid.ULID]*activeRun{}}
}

// requestStop handles a request that id's run stop (ev: EventReplaced by a newer job of
// its slot, EventCancelled by Queue.Cancel). The run sees its stop signal now and its
// context is cancelled after the grace period; a run still in the prefetch buffer gets
// the grace period from its start.
func (t *runTracker) requestStop(id ulid.ULID, ev Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.active[id]
	if a == nil || a.job.stop == nil || !a.job.stopEvent.CompareAndSwap(nil, &ev) {
		return
	}
	a.job.stop.close()
	t.log.Info("venturi: run asked to stop", "job", id, "kind", a.job.kind, "why", ev)
	if a.cancel != nil {
		cancel := a.cancel
		time.AfterFunc(t.grace, func() { cancel(errStopped) })
	}
}

// stopAll closes the stop signal of every run: the worker is shutting down.
func (t *runTracker) stopAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.active {
		if a.job.stop != nil {
			a.job.stop.close()
		}
	}
}

// add tracks newly claimed jobs. An earlier run of the same job still tracked here lost
// its lease (the job was rescued and claimed again): it is cancelled.
func (t *runTracker) add(jobs []*claimed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range jobs {
		if old := t.active[j.id]; old != nil && old.cancel != nil {
			old.cancel(ErrLeaseLost)
		}
		t.active[j.id] = &activeRun{job: j, deadline: j.sent.Add(t.lease)}
	}
}

// begin marks j as started with cancel as its run's cancellation. It reports false when
// j's lease has run out (or j is no longer tracked): the run must not start.
func (t *runTracker) begin(j *claimed, cancel context.CancelCauseFunc) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.active[j.id]
	now := time.Now()
	if a == nil || a.job != j || now.After(a.deadline) {
		return false
	}
	a.cancel, a.started = cancel, now
	if j.stopEvent.Load() != nil {
		time.AfterFunc(t.grace, func() { cancel(errStopped) })
	}
	return true
}

// untimed exempts j's run from JobTimeout.
func (t *runTracker) untimed(j *claimed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.active[j.id]; a != nil && a.job == j {
		a.untimed = true
	}
}

// ended marks j's handler as returned: its result is being written.
func (t *runTracker) ended(j *claimed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.active[j.id]; a != nil && a.job == j {
		a.finished = true
	}
}

// remove stops tracking j: its result is durable, discarded, or left to the rescuer.
func (t *runTracker) remove(j *claimed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.active[j.id]; a != nil && a.job == j {
		delete(t.active, j.id)
	}
}

// holds reports whether j is still tracked as the same claim: no rescue and new claim of
// its job has replaced it here.
func (t *runTracker) holds(j *claimed) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.active[j.id]
	return a != nil && a.job == j
}

// writing marks the runs whose results a statement is writing now (on), or no longer
// (off: it failed, and they are retried).
func (t *runTracker) writing(reqs []*finishReq, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range reqs {
		if a := t.active[r.job.id]; a != nil && a.job == r.job {
			a.writing = on
		}
	}
}

// leased returns every tracked job whose result is not being written, in ID order (the
// lock order of the statements that take them). A run whose result is in flight is left
// out: the lease extension would wait for the row lock of the statement that ends it (and
// then find its lease gone with the run), and the two lock in different orders
// (FinishRuns in the heap order of its plan's bitmap scan), so they deadlocked, and
// PostgreSQL broke it only after deadlock_timeout, a whole extension's budget with a short
// lease (chaos: abandoned runs on healthy workers). Between two attempts of a failed write
// the runs are extended again.
func (t *runTracker) leased() []*claimed {
	t.mu.Lock()
	runs := make([]*claimed, 0, len(t.active))
	for _, a := range t.active {
		if !a.writing {
			runs = append(runs, a.job)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(runs, func(a, b *claimed) int { return a.id.Compare(b.id) })
	return runs
}

// extended records the result of a lease extension sent at sent for runs: the kept runs'
// leases now end a lease after sent; a started run that was not kept lost its job and is
// cancelled.
func (t *runTracker) extended(runs []*claimed, kept map[ulid.ULID]bool, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range runs {
		a := t.active[j.id]
		if a == nil || a.job != j {
			continue // the run ended meanwhile, and the job may run again under a new token
		}
		switch {
		case kept[j.id]:
			a.deadline = sent.Add(t.lease)
		case a.cancel == nil:
			a.deadline = time.Time{} // buffered, not started: it will not start
		case a.finished:
			// Its result was written while the statement ran; the finisher removes it.
		default:
			t.log.Warn("venturi: lease lost; cancelling run", "job", j.id, "kind", j.kind)
			a.cancel(ErrLeaseLost)
		}
	}
}

// enforce cancels the running handlers whose lease would expire within margin
// (self-fencing: a run whose lease could not be extended stops before another worker
// may take its job) and those that ran longer than jobTimeout (when positive). One pass
// serves every run, instead of a timer per run.
func (t *runTracker) enforce(margin, jobTimeout time.Duration) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.active {
		switch {
		case a.cancel == nil || a.finished:
		case now.Add(margin).After(a.deadline):
			a.cancel(ErrLeaseLost)
		case jobTimeout > 0 && !a.untimed && now.Sub(a.started) > jobTimeout:
			a.cancel(errJobTimeout)
		}
	}
}

// stuck returns the runs whose handler started and has not returned, in ID order.
func (t *runTracker) stuck() []*claimed {
	t.mu.Lock()
	var runs []*claimed
	for _, a := range t.active {
		if a.cancel != nil && !a.finished {
			runs = append(runs, a.job)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(runs, func(a, b *claimed) int { return a.id.Compare(b.id) })
	return runs
}
