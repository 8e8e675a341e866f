package venturi

import (
	"fmt"
	"unicode/utf8"
)

// Task is the producer side of a unit of work: a payload struct that names its kind.
//
// Kind must be callable on the zero value, unique per task type and stable across
// releases: it is stored with the payload and routes the job back to its handler. The
// payload itself is the struct's JSON encoding.
//
// A task type opts into further enqueue-time policy by implementing the optional
// interfaces [Prioritizer], [Deduplicator] and [BackoffPolicy], and a typed merge method
// (see [Pending]) or a [MergeRule] ([RuleMerger]). None of them mention the worker's state
// type, so a producer binary compiles against Task alone.
type Task interface {
	Kind() string
}

// Prioritizer is implemented by tasks whose jobs do not run at [PriorityNormal].
type Prioritizer interface {
	Priority() Priority
}

// Deduplicator is implemented by tasks that coalesce with pending jobs of the same kind.
// An empty key means the job is never coalesced. Two pending jobs with the same
// (kind, key) are merge candidates, found through an index.
type Deduplicator interface {
	DedupKey() DedupKey
}

// Queuer is implemented by tasks whose jobs go to a named queue instead of
// [DefaultQueue]. A worker claims from one queue ([Config].Queue): give worker fleets that
// serve different kinds their own queues, so that one fleet's backlog never sits in the
// other's claim path (see the README, "Claiming"). The name is 1 to 128 bytes of UTF-8.
type Queuer interface {
	Queue() string
}

// DefaultQueue is the queue of a task that does not implement [Queuer], and the queue a
// worker with an empty [Config].Queue claims from.
const DefaultQueue = "default"

// validQueue reports whether name can name a queue.
func validQueue(name string) bool {
	return name != "" && len(name) <= 128 && utf8.ValidString(name) && !containsNUL(name)
}

// BackoffPolicy is implemented by tasks that override the worker's retry backoff. A zero
// field in the returned Backoff keeps the worker's value for that field.
type BackoffPolicy interface {
	Backoff() Backoff
}

// Priority orders claims: a higher value runs first. Values outside
// [PriorityMin, PriorityMax] are clamped.
type Priority int16

// Priorities. Any value in [PriorityMin, PriorityMax] may be used.
const (
	PriorityMin      Priority = -1000
	PriorityLow      Priority = -10
	PriorityNormal   Priority = 0
	PriorityHigh     Priority = 10
	PriorityCritical Priority = 100
	PriorityMax      Priority = 1000
)

func (p Priority) clamp() Priority {
	return min(max(p, PriorityMin), PriorityMax)
}

// DedupKey is a task's candidacy key for deduplication. The empty key opts out.
type DedupKey string

// MaxDedupKeyBytes is the longest dedup key an enqueue accepts.
const MaxDedupKeyBytes = 512

// KeyOf builds a DedupKey from its parts, joined with '/': KeyOf("user", 42) is "user/42".
// Parts are not escaped, so KeyOf("a/b", "c") equals KeyOf("a", "b/c"): use parts that
// cannot contain '/', such as IDs and numbers, or build the key yourself.
func KeyOf(parts ...any) DedupKey {
	var b []byte
	for i, p := range parts {
		if i > 0 {
			b = append(b, '/')
		}
		b = fmt.Append(b, p)
	}
	return DedupKey(b)
}

// reflect.Type -> *merger or error
