package venturi

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// QueueState is a queue's settings and job counts, as [Queue.Queues] reads them.
type QueueState struct {
	Name string
	// Paused queues start no job; see [Queue.PauseQueue].
	Paused bool
	// Concurrency is the most of the queue's jobs that run at once across all workers; 0
	// for no limit. See [Queue.SetQueueConcurrency].
	Concurrency int
	// Jobs by state.
	Available, Running, Scheduled int64
}

// PauseQueue pauses the named queue: no worker starts a job from it until
// [Queue.ResumeQueue], jobs already running finish, and the pause survives restarts of
// workers and of the database. Workers learn it by notification at once, or at their
// next poll (Config.PollInterval) when notifications are off; jobs they hold in their
// prefetch buffers go back to the queue. Enqueues into a paused queue still succeed.
// The audit log records it (queue.pause, with ctx's actor: [WithActor]), as it records
// ResumeQueue and SetQueueConcurrency.
func (q *Queue) PauseQueue(ctx context.Context, name string) error {
	return q.setQueue(ctx, name, AuditQueuePause, "", func(tx pgx.Tx) error {
		return q.q.SetQueuePaused(ctx, tx, dbsqlc.SetQueuePausedParams{Name: name, Paused: true})
	})
}

// ResumeQueue resumes a paused queue; workers start its jobs again at once.
func (q *Queue) ResumeQueue(ctx context.Context, name string) error {
	return q.setQueue(ctx, name, AuditQueueResume, "", func(tx pgx.Tx) error {
		return q.q.SetQueuePaused(ctx, tx, dbsqlc.SetQueuePausedParams{Name: name, Paused: false})
	})
}

// SetQueueConcurrency limits how many of the named queue's jobs run at once across all
// workers (0 removes the limit). Jobs in the prefetch buffers of workers count as
// running. Every claim from a limited queue goes through the gated claim, which
// serializes the queue's claims; use it for queues that protect something, not for the
// queues with the highest throughput.
func (q *Queue) SetQueueConcurrency(ctx context.Context, name string, n int) error {
	if n < 0 || n > 1<<30 {
		return fmt.Errorf("venturi: queue concurrency %d; want 0 (no limit) or more", n)
	}
	return q.setQueue(ctx, name, AuditQueueConcurrency, fmt.Sprintf("concurrency %d", n), func(tx pgx.Tx) error {
		return q.q.SetQueueConcurrency(ctx, tx, dbsqlc.SetQueueConcurrencyParams{Name: name, Concurrency: int32(n)})
	})
}

// setQueue changes a queue's settings, records the action in the audit log and notifies
// the workers, in one transaction.
func (q *Queue) setQueue(ctx context.Context, name, action, reason string, set func(pgx.Tx) error) error {
	if !validQueue(name) {
		return fmt.Errorf("%w: %q", ErrInvalidQueue, name)
	}
	return pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		if err := set(tx); err != nil {
			return err
		}
		if _, err := q.audit(ctx, tx, action, name, 0, reason); err != nil {
			return err
		}
		if q.poll {
			return nil
		}
		return q.q.Notify(ctx, tx, dbsqlc.NotifyParams{Channel: q.channel, Payload: queuePrefix + name})
	})
}

// Queues lists every queue that has pending or running jobs or settings, by name.
func (q *Queue) Queues(ctx context.Context) ([]QueueState, error) {
	rows, err := q.q.ListQueues(ctx, q.pool)
	if err != nil {
		return nil, err
	}
	out := make([]QueueState, len(rows))
	for i, r := range rows {
		out[i] = QueueState{Name: r.Name, Paused: r.Paused, Concurrency: int(r.Concurrency),
			Available: r.Available, Running: r.Running, Scheduled: r.Scheduled}
	}
	return out, nil
}

// CircuitState is the state of a circuit breaker.
type CircuitState string

// Circuit breaker states.
const (
	// CircuitClosed: jobs run; failures in a row are counted.
	CircuitClosed CircuitState = "closed"
	// CircuitOpen: no job of the kind (or partition) is claimed until OpenUntil.
	CircuitOpen CircuitState = "open"
	// CircuitHalfOpen: the cooldown is over; the next claim runs one probe job, whose
	// outcome closes or reopens the breaker.
	CircuitHalfOpen CircuitState = "half_open"
	// CircuitProbing: the probe is running; no other job is claimed until it ends.
	CircuitProbing CircuitState = "probing"
)

// Circuit is one circuit breaker (see [Breaker]).
type Circuit struct {
	Kind string
	// Partition is the partition a per-partition breaker covers; empty for a kind-wide
	// breaker (and for the jobs of a per-partition kind that have no partition).
	Partition string
	State     CircuitState
	// Failures is how many runs in a row have failed; Threshold is how many open it.
	Failures, Threshold int
	// OpenUntil is when an open breaker lets a probe through; nil when closed.
	OpenUntil *time.Time
	UpdatedAt time.Time
}

// Circuits lists every circuit breaker that has seen a claim, by kind and partition.
func (q *Queue) Circuits(ctx context.Context) ([]Circuit, error) {
	rows, err := q.q.ListCircuits(ctx, q.pool)
	if err != nil {
		return nil, err
	}
	out := make([]Circuit, len(rows))
	for i, r := range rows {
		out[i] = circuitOf(r.Kind, r.Part.String, r.Fails, r.Threshold, r.OpenUntil, r.ProbeUntil, r.UpdatedAt)
	}
	return out, nil
}

// circuitOf describes a breaker row; the state is relative to the local clock.
func circuitOf(kind, part string, fails, threshold int32, openUntil, probeUntil *time.Time, updated time.Time) Circuit {
	c := Circuit{Kind: kind, Partition: part, Failures: int(fails), Threshold: int(threshold),
		OpenUntil: openUntil, UpdatedAt: updated, State: CircuitClosed}
	now := time.Now()
	switch {
	case openUntil == nil:
	case openUntil.After(now):
		c.State = CircuitOpen
	case probeUntil != nil && probeUntil.After(now):
		c.State = CircuitProbing
	default:
		c.State = CircuitHalfOpen
	}
	return c
}
