package main

import (
	"context"
	"sync/atomic"
	"time"

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
	riverBacklogQueue = "bench_backlog"
)

// pickupRec records, per sequence number, when the enqueue call returned (the commit was
// acknowledged), when it was issued, and when the handler started; all from one process
// clock (time.Now's monotonic reading relative to base).
type pickupRec struct {
	base    time.Time
	issued  []atomic.Int64
	acked   []atomic.Int64
	started []atomic.Int64
	handled atomic.Int64
}

func newPickupRec(n int) *pickupRec {
	return &pickupRec{base: time.Now(), issued: make([]atomic.Int64, n), acked: make([]atomic.Int64, n), started: make([]atomic.Int64, n)}
}

func (p *pickupRec) now() int64 { return int64(time.Since(p.base)) }

func (p *pickupRec) start(seq int) {
	if p == nil || seq < 0 || seq >= len(p.started) {
		return
	}
	if p.started[seq].CompareAndSwap(0, p.now()) {
		p.handled.Add(1)
	}
}

// benchState is the venturi workers' shared state.
type benchState struct {
	pickup *pickupRec
}

// ---- venturi tasks ---------------------------------------------------------------------

type NoopTask struct {
	N int `json:"n"`
}

func (NoopTask) Kind() string { return kindNoop }

func (NoopTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

type DedupTask struct {
	Key string `json:"key"`
}

func (DedupTask) Kind() string { return kindDedup }

func (t DedupTask) DedupKey() venturi.DedupKey { return venturi.DedupKey(t.Key) }

func (DedupTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

type PickupTask struct {
	Seq int `json:"seq"`
}

func (PickupTask) Kind() string { return kindPickup }

func (t PickupTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	s.pickup.start(t.Seq)
	return venturi.Completed(), nil
}

// ---- River job args and workers ----------------------------------------------------------

type NoopArgs struct {
	N int `json:"n"`
}

func (NoopArgs) Kind() string { return kindNoop }

type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

func (noopWorker) Work(ctx context.Context, job *river.Job[NoopArgs]) error { return nil }

type DedupArgs struct {
	Key string `json:"key"`
}

func (DedupArgs) Kind() string { return kindDedup }

func (DedupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type PickupArgs struct {
	Seq int `json:"seq"`
}

func (PickupArgs) Kind() string { return kindPickup }

type pickupWorker struct {
	river.WorkerDefaults[PickupArgs]
	rec *pickupRec
}

func (w *pickupWorker) Work(ctx context.Context, job *river.Job[PickupArgs]) error {
	w.rec.start(job.Args.Seq)
	return nil
}
