package venturi

import (
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"
)

// Flow control: what a task type declares. The database enforces it in the claim, across
// all workers (see the README, "Flow control").

// Slotter is implemented by tasks whose jobs take a slot: at most Slot().Limit jobs with
// the same slot key run at once across all workers. Slots govern running jobs; a dedup
// key ([Deduplicator]) coalesces pending ones, and a task may have both.
type Slotter interface {
	Slot() Slot
}

// Slot is a job's admission slot. A zero Key means the job takes no slot.
type Slot struct {
	// Key names the slot, at most MaxSlotKeyBytes of UTF-8 without NUL or U+001F. Slot
	// keys are shared by all kinds: two task types that name the same key share its slot.
	Key string
	// Limit is how many jobs with the key may run at once; 0 means 1.
	Limit int
	// Policy says what a job does when it becomes runnable while its slot is full.
	Policy SlotPolicy
}

// SlotPolicy is what a job does when it becomes runnable while its slot is full.
type SlotPolicy int8

// Slot policies (the seed Taskvisor's admission policies).
const (
	// SlotQueue waits: the job runs when a slot frees, in claim order (priority, due
	// time, ID).
	SlotQueue SlotPolicy = iota
	// SlotReplace asks the oldest running job of the slot to stop: its run sees
	// [Run.Shutdown] at once and its context is cancelled after the worker's
	// ShutdownGrace; unless it completes meanwhile, it ends in [StateCancelled] with a
	// replaced journal entry, which is not a failure. The newer job runs next.
	SlotReplace
	// SlotDropIfRunning ends the new job at once in [StateCancelled], with a dropped
	// journal entry saying which slot was full.
	SlotDropIfRunning
)

// String returns the policy's name.
func (p SlotPolicy) String() string {
	switch p {
	case SlotQueue:
		return "queue"
	case SlotReplace:
		return "replace"
	case SlotDropIfRunning:
		return "drop_if_running"
	}
	return fmt.Sprintf("SlotPolicy(%d)", int(p))
}

// Partitioner is implemented by tasks whose jobs belong to a partition, such as a tenant
// or a host. A queue's jobs with partitions are claimed in turn between partitions (in
// virtual-time order: see "Fairness" in the README), so one partition's flood does not
// hold the others back; a kind's rate limit and
// breaker can apply per partition ([Limits]). A job with a slot and no partition is in
// the partition named by its slot key.
type Partitioner interface {
	Partition() string
}

// Limiter is implemented by task types with kind-wide limits. Limits is called on the
// zero value when the type is registered; the worker records the limits in the database
// at Start, and every worker enforces them in the claim (the last worker to start with a
// kind's limits sets them).
type Limiter interface {
	Limits() Limits
}

// Limits are a kind's limits across all workers. The zero value limits nothing.
type Limits struct {
	// Concurrency is the most jobs of the kind that run at once; 0 for no limit.
	Concurrency int
	// Rate limits how often jobs of the kind start.
	Rate Rate
	// Breaker stops claiming the kind (or one partition of it) after failures.
	Breaker Breaker
}

// Rate allows at most N starts in any window of length Per (by the database clock). The
// zero value allows any rate.
type Rate struct {
	N   int
	Per time.Duration
	// PerPartition applies the rate to each partition of the kind separately.
	PerPartition bool
}

// Breaker is a circuit breaker: after Failures failed runs in a row, the kind (or the
// partition, with PerPartition) is not claimed for Cooldown; then one probe run decides:
// a success closes the breaker, a failure opens it for another Cooldown. While it is
// open, jobs wait without running, so their failures and backstop are untouched. A
// failed run is one that returned an error (retryable or not) or was abandoned. The zero
// value is no breaker.
type Breaker struct {
	Failures     int
	Cooldown     time.Duration // default DefaultBreakerCooldown
	PerPartition bool
}

// Bounds of the flow-control declarations.
const (
	MaxSlotKeyBytes   = 256
	MaxPartitionBytes = 256
	// DefaultBreakerCooldown is a Breaker's cooldown when it names none.
	DefaultBreakerCooldown = 30 * time.Second
)

// validate checks l and fills its defaults.
func (l Limits) validate() (Limits, error) {
	switch {
	case l.Concurrency < 0:
		return l, fmt.Errorf("venturi: Limits.Concurrency %d is negative", l.Concurrency)
	case l.Rate.N < 0:
		return l, fmt.Errorf("venturi: Limits.Rate.N %d is negative", l.Rate.N)
	case l.Rate.N > 0 && l.Rate.Per <= 0:
		return l, fmt.Errorf("venturi: Limits.Rate.Per must be positive with Rate.N %d", l.Rate.N)
	case l.Breaker.Failures < 0:
		return l, fmt.Errorf("venturi: Limits.Breaker.Failures %d is negative", l.Breaker.Failures)
	case l.Breaker.Cooldown < 0:
		return l, fmt.Errorf("venturi: Limits.Breaker.Cooldown %v is negative", l.Breaker.Cooldown)
	}
	if l.Breaker.Failures > 0 && l.Breaker.Cooldown == 0 {
		l.Breaker.Cooldown = DefaultBreakerCooldown
	}
	return l, nil
}

// limitsOf returns T's declared limits.
func limitsOf[T Task]() (Limits, error) {
	var v any
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		v = reflect.New(t.Elem()).Interface() // a nil pointer's method could panic
	} else {
		var zero T
		v = zero
	}
	l, ok := v.(Limiter)
	if !ok {
		return Limits{}, nil
	}
	return l.Limits().validate()
}

// validText reports whether s is at most n bytes of UTF-8 without NUL or the unit
// separator (which joins a gate's key parts).
func validText(s string, n int) bool {
	if len(s) > n || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 || s[i] == 0x1f {
			return false
		}
	}
	return true
}
