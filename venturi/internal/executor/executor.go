// Package executor holds venturi's handler pool ([Executor]): the worker's service that
// runs the claimed jobs of one queue on Concurrency long-lived goroutines, one slot per
// running handler. It starts each job with the run tracker (internal/jobrun), gives its
// run a context that the worker can cancel all at once ([Executor.Cancel]), marks the run
// ended when its handler returns, and hands the end on; it reports freed slots to the
// fetcher ([Executor.Freed]) and waits for running handlers at shutdown
// ([Executor.Shutdown], [Executor.Idle]).
//
// The executor knows nothing of package venturi: what a run does (decode the job, run the
// registered handler with panic capture, turn its result into a [jobrun.End]) and what
// becomes of its end (the completer, the worker's event subscribers) are the functions the
// worker gives it ([Config.Run], [Config.Ended]), bound once, not per job.
package executor

import (
	"context"
	"sync"

	"github.com/venturi-dev/venturi/internal/jobrun"
)

// Config configures an [Executor].
type Config struct {
	// Concurrency is how many handlers may run at once. Required (positive).
	Concurrency int
	// Tracker holds the runs: each starts with Tracker.Begin and is marked ended with
	// Tracker.Ended when its handler returns. Required.
	Tracker *jobrun.Tracker
	// Run runs j's handler with ctx and returns the run's end. It is called on a handler
	// goroutine; ctx is cancelled once it returns. Required.
	Run func(ctx context.Context, j *jobrun.Job) *jobrun.End
	// Ended is called with the end Run returned, on the handler goroutine, after the run
	// is marked ended and before its slot frees. Required.
	Ended func(end *jobrun.End)
	// Untimed reports whether runs of kind are exempt from JobTimeout (a service runs for
	// as long as it likes). Nil: none is.
	Untimed func(kind string) bool
	// LeaseLost is the cause with which the context of a job that cannot start (its lease
	// ran out while it waited) is cancelled. Required.
	LeaseLost error
}

// Executor runs handlers: Concurrency long-lived goroutines take claimed jobs, run them
// with Config.Run and hand their ends to Config.Ended. Reusing goroutines keeps their
// grown stacks: a goroutine per job would grow a fresh stack every time.
type Executor struct {
	tracker   *jobrun.Tracker
	run       func(ctx context.Context, j *jobrun.Job) *jobrun.End
	ended     func(*jobrun.End)
	untimed   func(kind string) bool
	leaseLost error
	slots     chan struct{} // one token per running handler
	starts    chan start
	freed     chan struct{}   // a slot was freed (capacity 1: a wake-up, not a count)
	shutdown  chan struct{}   // closed when graceful shutdown begins
	hardCtx   context.Context // parent of every run's context
	hard      context.CancelCauseFunc
	handlers  sync.WaitGroup
}

// start hands a claimed job to a handler goroutine.
type start struct {
	job    *jobrun.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// New returns an executor configured by cfg, its handler goroutines started. Every run's
// context derives from parent.
func New(parent context.Context, cfg Config) *Executor {
	e := &Executor{
		tracker: cfg.Tracker, run: cfg.Run, ended: cfg.Ended, untimed: cfg.Untimed, leaseLost: cfg.LeaseLost,
		slots:    make(chan struct{}, cfg.Concurrency),
		starts:   make(chan start, cfg.Concurrency),
		freed:    make(chan struct{}, 1),
		shutdown: make(chan struct{}),
	}
	e.hardCtx, e.hard = context.WithCancelCause(parent)
	for range cfg.Concurrency {
		go func() {
			for s := range e.starts {
				e.runHandler(s)
			}
		}()
	}
	return e
}

// Free reports how many handler slots are free.
func (e *Executor) Free() int { return cap(e.slots) - len(e.slots) }

// Freed returns a channel that receives when a slot was freed (a wake-up, not a count).
func (e *Executor) Freed() <-chan struct{} { return e.freed }

// Start runs j on a free slot; the caller has checked that one is free. A job whose
// lease ran out while it waited in the prefetch buffer does not start: it is (or will
// be) rescued, and its writes would be discarded.
func (e *Executor) Start(j *jobrun.Job) {
	e.slots <- struct{}{}
	ctx, cancel := context.WithCancelCause(e.hardCtx)
	if !e.tracker.Begin(j, cancel) {
		cancel(e.leaseLost)
		e.tracker.Remove(j)
		<-e.slots
		return
	}
	if e.untimed != nil && e.untimed(j.Kind) {
		e.tracker.Untimed(j) // a service runs for as long as it likes: no JobTimeout
	}
	e.handlers.Add(1)
	e.starts <- start{job: j, ctx: ctx, cancel: cancel}
}

func (e *Executor) runHandler(s start) {
	defer e.handlers.Done()
	defer func() {
		<-e.slots
		select {
		case e.freed <- struct{}{}:
		default:
		}
	}()
	req := e.run(s.ctx, s.job)
	s.cancel(nil)
	e.tracker.Ended(s.job)
	e.ended(req)
}

// Shutdown begins graceful shutdown: the channel ShuttingDown returns closes (running
// handlers see Run.Shutdown), and the handler goroutines exit once their runs return.
// Nothing may start after it.
func (e *Executor) Shutdown() {
	close(e.starts)
	close(e.shutdown)
}

// ShuttingDown returns a channel closed when Shutdown is called.
func (e *Executor) ShuttingDown() <-chan struct{} { return e.shutdown }

// Cancel cancels the context of every run, running or to come, with cause.
func (e *Executor) Cancel(cause error) { e.hard(cause) }

// Idle returns a channel closed when no handler is running.
func (e *Executor) Idle() <-chan struct{} {
	done := make(chan struct{})
	go func() { e.handlers.Wait(); close(done) }()
	return done
}
