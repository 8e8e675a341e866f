package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/venturi-dev/venturi"
)

// Kinds shared by both libraries. River routes by queue, venturi by kind: the backlog kind
// is never registered on a venturi worker, and River's backlog lives in its own queue.
const (
	kindNoop          = "bench_noop"
	kindDedup         = "bench_dedup"
	kindPickup        = "bench_pickup"
	kindBacklog       = "bench_backlog"
	kindSustain       = "bench_sustain"
	riverBacklogQueue = "bench_backlog"
)

// pickupRec records, per sequence number, when the enqueue call returned (the commit was
// acknowledged), when it was issued, and when the handler started; all from one clock
// (time.Now's monotonic reading relative to base; a graphile-worker process reports
// CLOCK_MONOTONIC, the same clock, which baseMono puts on this timeline).
type pickupRec struct {
	base     time.Time
	baseMono int64 // CLOCK_MONOTONIC at base (monoNow)
	issued   []atomic.Int64
	acked    []atomic.Int64
	started  []atomic.Int64
	handled  atomic.Int64
}

func newPickupRec(n int) *pickupRec {
	m0 := monoNow()
	base := time.Now()
	m1 := monoNow()
	return &pickupRec{base: base, baseMono: m0 + (m1-m0)/2, issued: make([]atomic.Int64, n), acked: make([]atomic.Int64, n), started: make([]atomic.Int64, n)}
}

func (p *pickupRec) now() int64 { return int64(time.Since(p.base)) }

func (p *pickupRec) start(seq int) { p.startAt(seq, p.now()) }

// startMono records a handler's start read on CLOCK_MONOTONIC in another process.
func (p *pickupRec) startMono(seq int, mono int64) { p.startAt(seq, mono-p.baseMono) }

func (p *pickupRec) startAt(seq int, t int64) {
	if p == nil || seq < 0 || seq >= len(p.started) || t <= 0 {
		return
	}
	if p.started[seq].CompareAndSwap(0, t) {
		p.handled.Add(1)
	}
}

// benchState is the venturi workers' shared state.
type benchState struct {
	pickup  *pickupRec
	sustain *sustainRec
	sleep   time.Duration // the no-op handler's simulated I/O (bench worker -sleep)

	handoff *handoffRec   // scenario 20: the links' handler starts
	db      *pgxpool.Pool // scenario 22: the handlers' writes (bench worker -chunks)
	calls   atomic.Int64  // scenario 22: handler calls, numbering them
}

// pause waits d (a handler's simulated I/O) or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ---- venturi tasks ---------------------------------------------------------------------

// NoopTask is venturi's no-op job (scenarios 1, 3, 4 and 6).
type NoopTask struct {
	N int `json:"n"`
}

// Kind names the no-op kind.
func (NoopTask) Kind() string { return kindNoop }

// Handle does nothing (or sleeps the worker's -sleep, simulated I/O).
func (NoopTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	if err := pause(ctx, s.sleep); err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.Completed(), nil
}

// DedupTask is venturi's job with a dedup key (scenario 2).
type DedupTask struct {
	Key string `json:"key"`
}

// Kind names the dedup kind.
func (DedupTask) Kind() string { return kindDedup }

// DedupKey is the task's key.
func (t DedupTask) DedupKey() venturi.DedupKey { return venturi.DedupKey(t.Key) }

// Handle does nothing.
func (DedupTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// PickupTask is venturi's job of scenario 5, numbered by Seq.
type PickupTask struct {
	Seq int `json:"seq"`
}

// Kind names the pickup kind.
func (PickupTask) Kind() string { return kindPickup }

// Handle records when the handler started.
func (t PickupTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	s.pickup.start(t.Seq)
	return venturi.Completed(), nil
}

// SustainTask is venturi's job of scenario 8. E is when it was enqueued and D, for a
// delayed job, when it is due; both in Unix microseconds on the database clock (see
// producers.enqueueSustain).
type SustainTask struct {
	E int64 `json:"e"`
	D int64 `json:"d,omitempty"`
}

// Kind names the sustained kind.
func (SustainTask) Kind() string { return kindSustain }

// Handle records when the handler started.
func (t SustainTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	s.sustain.start(t.E, t.D)
	return venturi.Completed(), nil
}

// ---- River job args and workers ----------------------------------------------------------

// NoopArgs is River's no-op job.
type NoopArgs struct {
	N int `json:"n"`
}

// Kind names the no-op kind.
func (NoopArgs) Kind() string { return kindNoop }

type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
	sleep time.Duration // simulated I/O (bench worker -sleep)
}

// Work does nothing (or sleeps the worker's -sleep, simulated I/O).
func (w noopWorker) Work(ctx context.Context, job *river.Job[NoopArgs]) error {
	return pause(ctx, w.sleep)
}

// DedupArgs is River's job that is unique by its arguments.
type DedupArgs struct {
	Key string `json:"key"`
}

// Kind names the dedup kind.
func (DedupArgs) Kind() string { return kindDedup }

// InsertOpts makes the job unique by its arguments.
func (DedupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// PickupArgs is River's job of scenario 5.
type PickupArgs struct {
	Seq int `json:"seq"`
}

// Kind names the pickup kind.
func (PickupArgs) Kind() string { return kindPickup }

type pickupWorker struct {
	river.WorkerDefaults[PickupArgs]
	rec *pickupRec
}

// Work records when the handler started.
func (w *pickupWorker) Work(ctx context.Context, job *river.Job[PickupArgs]) error {
	w.rec.start(job.Args.Seq)
	return nil
}

// SustainArgs is River's job of scenario 8; see SustainTask.
type SustainArgs struct {
	E int64 `json:"e"`
	D int64 `json:"d,omitempty"`
}

// Kind names the sustained kind.
func (SustainArgs) Kind() string { return kindSustain }

type sustainWorker struct {
	river.WorkerDefaults[SustainArgs]
	rec *sustainRec
}

// Work records when the handler started.
func (w *sustainWorker) Work(ctx context.Context, job *river.Job[SustainArgs]) error {
	w.rec.start(job.Args.E, job.Args.D)
	return nil
}
