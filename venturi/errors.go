package venturi

import (
	"errors"
	"fmt"
	"time"
)

// Errors an enqueue returns for a task it refuses; nothing is written.
var (
	ErrEmptyKind       = errors.New("venturi: task kind is empty")
	ErrKindTooLong     = errors.New("venturi: task kind is longer than 128 bytes")
	ErrInvalidQueue    = errors.New("venturi: queue name must be 1 to 128 bytes of UTF-8 text without NUL")
	ErrPayloadTooLarge = fmt.Errorf("venturi: encoded payload is larger than %d bytes", MaxPayloadBytes)
	ErrInvalidPayload  = errors.New("venturi: payload cannot be stored")
	// ErrInvalidCarry is a run's carry that cannot be stored (it does not encode as JSON,
	// or holds text jsonb refuses); ErrCarryTooLarge one whose encoding is larger than
	// MaxPayloadBytes. The run that tried to store it fails (it is retried), with the
	// error as its note; [Run.Checkpoint] returns it.
	ErrInvalidCarry    = errors.New("venturi: carry cannot be stored")
	ErrCarryTooLarge   = fmt.Errorf("venturi: encoded carry is larger than %d bytes", MaxPayloadBytes)
	ErrDedupKeyTooLong = fmt.Errorf("venturi: dedup key is longer than %d bytes", MaxDedupKeyBytes)
	ErrIsolation       = errors.New("venturi: an enqueue with a dedup key needs a READ COMMITTED transaction")
	ErrNotFound        = errors.New("venturi: job not found")
	// ErrInvalidSlot is returned for a Slot with an overlong or non-text key, a negative
	// limit or an unknown policy.
	ErrInvalidSlot = fmt.Errorf("venturi: slot key must be at most %d bytes of UTF-8 text without NUL or U+001F, its limit at least 0 and its policy one of SlotQueue, SlotReplace, SlotDropIfRunning", MaxSlotKeyBytes)
	// ErrInvalidPartition is returned for an overlong or non-text partition.
	ErrInvalidPartition = fmt.Errorf("venturi: partition must be at most %d bytes of UTF-8 text without NUL or U+001F", MaxPartitionBytes)
)

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

// Delay reports the delay a [RetryIn] error asks for before the job runs again; ok is
// false for a [Permanent] error, which asks for none.
func (e *TaskError) Delay() (d time.Duration, ok bool) {
	if e.permanent || !e.hasDelay {
		return 0, false
	}
	return e.retryIn, true
}

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
	if errors.As(err, &te) {
		return te.Delay()
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
