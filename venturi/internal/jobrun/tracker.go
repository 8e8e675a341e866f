package jobrun

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// TrackerConfig configures a [Tracker].
type TrackerConfig struct {
	// Lease is the lease a claim holds: a run's lease ends Lease after its claim (or its
	// last extension) was sent. Required (positive).
	Lease time.Duration
	// Grace is how long a run asked to stop has after its stop signal before its context
	// is cancelled.
	Grace time.Duration
	// Logger receives the tracker's messages (a run asked to stop, a lease lost).
	// Required.
	Logger *slog.Logger
	// LeaseLost is the cause a run's context is cancelled with when its lease is lost or
	// would expire (venturi.ErrLeaseLost). Required.
	LeaseLost error
	// Stopped is the cause a run asked to stop is cancelled with after Grace. Required.
	Stopped error
	// TimedOut is the cause a run that ran longer than its job timeout is cancelled
	// with. Required.
	TimedOut error
}

// run is a claimed job whose result is not yet durable.
type run struct {
	job      *Job
	cancel   context.CancelCauseFunc // nil while the job waits in the prefetch buffer
	deadline time.Time               // local monotonic estimate of the lease's expiry
	finished bool                    // the handler returned; its result is being written
	writing  bool                    // a statement writing its result is in flight: not extended
	started  time.Time               // local clock when the handler started, for JobTimeout
	untimed  bool                    // JobTimeout does not apply (a singleton service)
}

// Tracker alone owns the set of claimed jobs whose result is not yet durable: the
// fetcher adds them, the executor starts and ends them, the lease extender and the
// completer consult it, and Stop asks it for runs that ignore cancellation. A job may be
// claimed again under a new token while a stale entry for it is still here; every method
// matches the *Job, not only the ID. Its methods are safe for concurrent use.
type Tracker struct {
	lease     time.Duration
	grace     time.Duration // how long a replaced run has after its stop signal
	log       *slog.Logger
	leaseLost error
	stopped   error
	timedOut  error

	mu     sync.Mutex
	active map[ulid.ULID]*run
}

// NewTracker returns an empty tracker configured by cfg.
func NewTracker(cfg TrackerConfig) *Tracker {
	return &Tracker{
		lease: cfg.Lease, grace: cfg.Grace, log: cfg.Logger,
		leaseLost: cfg.LeaseLost, stopped: cfg.Stopped, timedOut: cfg.TimedOut,
		active: map[ulid.ULID]*run{},
	}
}

// RequestStop handles a request that id's run stop (ev: "replaced" by a newer job of its
// slot, "cancelled" by Queue.Cancel). The run sees its stop signal now and its context is
// cancelled after the grace period; a run still in the prefetch buffer gets the grace
// period from its start.
func (t *Tracker) RequestStop(id ulid.ULID, ev string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.active[id]
	if a == nil || a.job.Stop == nil || !a.job.StopEvent.CompareAndSwap(nil, &ev) {
		return
	}
	a.job.Stop.Close()
	t.log.Info("venturi: run asked to stop", "job", id, "kind", a.job.Kind, "why", ev)
	if a.cancel != nil {
		cancel := a.cancel
		time.AfterFunc(t.grace, func() { cancel(t.stopped) })
	}
}

// StopAll closes the stop signal of every run: the worker is shutting down.
func (t *Tracker) StopAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.active {
		if a.job.Stop != nil {
			a.job.Stop.Close()
		}
	}
}

// Add tracks newly claimed jobs. An earlier run of the same job still tracked here lost
// its lease (the job was rescued and claimed again): it is cancelled.
func (t *Tracker) Add(jobs []*Job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range jobs {
		if old := t.active[j.ID]; old != nil && old.cancel != nil {
			old.cancel(t.leaseLost)
		}
		t.active[j.ID] = &run{job: j, deadline: j.Sent.Add(t.lease)}
	}
}

// Begin marks j as started with cancel as its run's cancellation. It reports false when
// j's lease has run out (or j is no longer tracked): the run must not start.
func (t *Tracker) Begin(j *Job, cancel context.CancelCauseFunc) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.active[j.ID]
	now := time.Now()
	if a == nil || a.job != j || now.After(a.deadline) {
		return false
	}
	a.cancel, a.started = cancel, now
	if j.StopEvent.Load() != nil {
		time.AfterFunc(t.grace, func() { cancel(t.stopped) })
	}
	return true
}

// Untimed exempts j's run from JobTimeout.
func (t *Tracker) Untimed(j *Job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.active[j.ID]; a != nil && a.job == j {
		a.untimed = true
	}
}

// Ended marks j's handler as returned: its result is being written.
func (t *Tracker) Ended(j *Job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.active[j.ID]; a != nil && a.job == j {
		a.finished = true
	}
}

// Remove stops tracking j: its result is durable, discarded, or left to the rescuer.
func (t *Tracker) Remove(j *Job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a := t.active[j.ID]; a != nil && a.job == j {
		delete(t.active, j.ID)
	}
}

// Holds reports whether j is still tracked as the same claim: no rescue and new claim of
// its job has replaced it here.
func (t *Tracker) Holds(j *Job) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.active[j.ID]
	return a != nil && a.job == j
}

// Writing marks the runs whose results a statement is writing now (on), or no longer
// (off: it failed, and they are retried).
func (t *Tracker) Writing(ends []*End, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range ends {
		if a := t.active[r.Job.ID]; a != nil && a.job == r.Job {
			a.writing = on
		}
	}
}

// Leased returns every tracked job whose result is not being written, in ID order (the
// lock order of the statements that take them). A run whose result is in flight is left
// out: the lease extension would wait for the row lock of the statement that ends it (and
// then find its lease gone with the run), and the two lock in different orders
// (FinishRuns in the heap order of its plan's bitmap scan), so they deadlocked, and
// PostgreSQL broke it only after deadlock_timeout, a whole extension's budget with a short
// lease (chaos: abandoned runs on healthy workers). Between two attempts of a failed write
// the runs are extended again.
func (t *Tracker) Leased() []*Job {
	t.mu.Lock()
	runs := make([]*Job, 0, len(t.active))
	for _, a := range t.active {
		if !a.writing {
			runs = append(runs, a.job)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(runs, func(a, b *Job) int { return a.ID.Compare(b.ID) })
	return runs
}

// Extended records the result of a lease extension sent at sent for runs. found holds the
// runs whose job still holds their token: true, extended (its lease now ends a lease after
// sent); false, not extended this time because another transaction held the job's row (its
// lease runs on; Enforce stops it if that runs out). A run not found lost its job: started,
// it is cancelled; buffered, it will not start.
func (t *Tracker) Extended(runs []*Job, found map[ulid.ULID]bool, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, j := range runs {
		a := t.active[j.ID]
		if a == nil || a.job != j {
			continue // the run ended meanwhile, and the job may run again under a new token
		}
		extended, ok := found[j.ID]
		switch {
		case ok && extended:
			a.deadline = sent.Add(t.lease)
		case ok:
			// Held by another transaction: the lease it has still stands.
		case a.cancel == nil:
			a.deadline = time.Time{} // buffered, not started: it will not start
		case a.finished:
			// Its result was written while the statement ran; the completer removes it.
		default:
			t.log.Warn("venturi: lease lost; cancelling run", "job", j.ID, "kind", j.Kind)
			a.cancel(t.leaseLost)
		}
	}
}

// Enforce cancels the running handlers whose lease would expire within margin
// (self-fencing: a run whose lease could not be extended stops before another worker
// may take its job) and those that ran longer than jobTimeout (when positive). One pass
// serves every run, instead of a timer per run.
func (t *Tracker) Enforce(margin, jobTimeout time.Duration) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.active {
		switch {
		case a.cancel == nil || a.finished:
		case now.Add(margin).After(a.deadline):
			a.cancel(t.leaseLost)
		case jobTimeout > 0 && !a.untimed && now.Sub(a.started) > jobTimeout:
			a.cancel(t.timedOut)
		}
	}
}

// Stuck returns the runs whose handler started and has not returned, in ID order.
func (t *Tracker) Stuck() []*Job {
	t.mu.Lock()
	var runs []*Job
	for _, a := range t.active {
		if a.cancel != nil && !a.finished {
			runs = append(runs, a.job)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(runs, func(a, b *Job) int { return a.ID.Compare(b.ID) })
	return runs
}
