package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
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

type outcomeKind uint8

const (
	outcomeCompleted outcomeKind = iota
	outcomePause
)

// Outcome is what a successful run decided: the job completed, or it pauses and runs again
// later. The zero Outcome is Completed with no note.
type Outcome struct {
	kind     outcomeKind
	note     string
	resumeIn time.Duration
}

// Completed completes the job.
func Completed() Outcome { return Outcome{} }

// CompletedWith completes the job with a note for its journal.
func CompletedWith(note string) Outcome { return Outcome{note: note} }

// PauseIn returns the job to pending, eligible again after d (zero yields at once). A pause
// is not a failure: the carry is persisted, no failure is recorded and the backstop is not
// consumed. It is the tool for a multi-step job that checkpoints its progress.
func PauseIn(d time.Duration) Outcome { return Outcome{kind: outcomePause, resumeIn: max(d, 0)} }

// PauseInWith is PauseIn with a note for the journal.
func PauseInWith(d time.Duration, note string) Outcome {
	return Outcome{kind: outcomePause, resumeIn: max(d, 0), note: note}
}

// IsPause reports whether the outcome is a pause.
func (o Outcome) IsPause() bool { return o.kind == outcomePause }

// Note returns the outcome's note.
func (o Outcome) Note() string { return o.note }

// ResumeIn returns a pause's delay.
func (o Outcome) ResumeIn() time.Duration { return o.resumeIn }

// String describes the outcome.
func (o Outcome) String() string {
	if o.kind == outcomePause {
		return fmt.Sprintf("pause(%v, %q)", o.resumeIn, o.note)
	}
	return fmt.Sprintf("completed(%q)", o.note)
}

// TaskError is a failure that says whether retrying can help. Any other error returned by
// a handler is retryable.
type TaskError struct {
	Err       error
	permanent bool
	retryIn   time.Duration
	hasDelay  bool
}

// Error returns the wrapped error's message, which becomes the run's note.
func (e *TaskError) Error() string {
	if e.Err == nil {
		return "permanent failure"
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *TaskError) Unwrap() error { return e.Err }

// Permanent reports whether the failure sends the job to dead.
func (e *TaskError) Permanent() bool { return e.permanent }

// Permanent wraps err so that the job goes to dead instead of retrying. It is how a task
// abandons work it knows will never succeed.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &TaskError{Err: err, permanent: true}
}

// RetryIn wraps err as a retryable failure that runs again after d instead of the
// backoff delay, for example to honour an HTTP Retry-After. It still counts toward the
// backstop. A zero d retries at once.
func RetryIn(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &TaskError{Err: err, retryIn: max(d, 0), hasDelay: true}
}

// Permanentf is Permanent(fmt.Errorf(format, args...)).
func Permanentf(format string, args ...any) error {
	return Permanent(fmt.Errorf(format, args...))
}

// retryDelay reports the delay a RetryIn error asks for.
func retryDelay(err error) (time.Duration, bool) {
	var te *TaskError
	if errors.As(err, &te) && te.hasDelay && !te.permanent {
		return te.retryIn, true
	}
	return 0, false
}

// IsPermanent reports whether err, or an error it wraps, is permanent.
func IsPermanent(err error) bool {
	var te *TaskError
	return errors.As(err, &te) && te.permanent
}

// ErrLeaseLost is returned by writes fenced by a run's token when the run no longer holds
// its job: the lease expired and the job was rescued, or shutdown released it. The run's
// writes are discarded; roll back anything that depended on them.
var ErrLeaseLost = errors.New("venturi: lease lost: the run no longer holds this job")

// Run is a handler's view of one execution of a job: its identity, history and carry, the
// attachment it records, and the graceful-shutdown signal.
type Run[C any] struct {
	id         ulid.ULID
	kind       string
	token      int64
	runs       int
	failures   int
	history    []JournalEntry
	carry      C
	attachment json.RawMessage
	shutdown   <-chan struct{}
	finish     func(ctx context.Context, tx pgx.Tx, o Outcome, carry *C, attachment json.RawMessage) error
	finalized  bool
}

// ID returns the job's ID.
func (r *Run[C]) ID() ulid.ULID { return r.id }

// Kind returns the job's kind.
func (r *Run[C]) Kind() string { return r.kind }

// Token returns the run's fencing token. It is unique per run; an application that keys
// its own effects by (job, token) can tell the runs of one job apart.
func (r *Run[C]) Token() int64 { return r.token }

// RunCount reports how many times the job has been executed, including this run.
func (r *Run[C]) RunCount() int { return r.runs }

// Failures reports how many earlier runs of the job failed (errors and abandoned runs).
func (r *Run[C]) Failures() int { return r.failures }

// History returns the journal entries of earlier runs and merges, oldest first.
func (r *Run[C]) History() []JournalEntry { return r.history }

// Carry returns the carried state (the zero value on the first run).
func (r *Run[C]) Carry() C { return r.carry }

// CarryMut returns the carried state for modification. Changes are persisted for the
// next run on both retry and pause, but not when the job completes or dies.
func (r *Run[C]) CarryMut() *C { return &r.carry }

// SetCarry replaces the carried state.
func (r *Run[C]) SetCarry(c C) { r.carry = c }

// SetAttachment records v's JSON encoding as this run's attachment: structured evidence
// kept in the journal whatever the outcome, errors included. The last call wins.
func (r *Run[C]) SetAttachment(v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("venturi: attachment: %w", err)
	}
	r.attachment = b
	return nil
}

// ShuttingDown reports whether the worker has begun a graceful shutdown. A long handler
// can poll it at a safe point and stop early, typically returning a Pause to checkpoint
// its carry.
func (r *Run[C]) ShuttingDown() bool {
	select {
	case <-r.shutdown:
		return true
	default:
		return false
	}
}

// Shutdown returns a channel closed when a graceful shutdown begins. It is distinct from
// the handler's ctx, which is cancelled only when the grace period ends or the lease is
// lost.
func (r *Run[C]) Shutdown() <-chan struct{} { return r.shutdown }

// CompleteTx records the outcome of this run inside tx, so the handler's own writes in tx
// commit atomically with it. The write is fenced by the run's token: if the run no longer
// holds the job it returns [ErrLeaseLost] and the caller must roll tx back. Return the
// outcome from Handle after committing; the worker then writes nothing more for this run.
// If tx rolls back instead, return an error from Handle and the run fails as usual.
func (r *Run[C]) CompleteTx(ctx context.Context, tx pgx.Tx, o Outcome) (Outcome, error) {
	if r.finalized {
		return o, errors.New("venturi: CompleteTx called twice for one run")
	}
	if err := r.finish(ctx, tx, o, &r.carry, r.attachment); err != nil {
		return o, err
	}
	r.finalized = true
	return o, nil
}
