package venturi

import (
	"context"
)

// Handler is the execution side of a task, implemented on the same struct as [Task]. S is
// the worker's shared state (its dependencies) and C the task's carry: state kept between
// runs of one job, persisted on retry and on pause. Tasks that keep nothing use struct{}.
//
// Handle runs with the payload as its receiver. It returns an [Outcome] (Completed or
// Pause) or an error: a plain error is a retryable failure scheduled with backoff, and
// [Permanent] sends the job to dead.
type Handler[S, C any] interface {
	Task
	Handle(ctx context.Context, run *Run[C], state S) (Outcome, error)
}

// HandlerFunc runs a task of type T against the worker's state S with carry C.
type HandlerFunc[T Task, S, C any] func(ctx context.Context, task T, run *Run[C], state S) (Outcome, error)
