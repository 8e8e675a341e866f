package venturi

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// Pending is the existing job a merge method sees on a dedup collision: its payload, its
// typed carry, how often it ran and its journal. It may be a paused job that has already
// run. A task type declares its merge policy with a method of exactly this shape:
//
//	func (d Digest) Merge(existing venturi.Pending[Digest, DigestCarry]) venturi.Merge[Digest, DigestCarry]
//
// C must be the carry type of the task's handler; [Register] rejects a mismatch. Without
// such a method, a collision replaces the pending job (Replace). The decision
// constructors are methods on Pending, so their type arguments are inferred:
// existing.Keep(), existing.Replace(), existing.With(task, carry), existing.Independent().
type Pending[T Task, C any] struct {
	ID       ulid.ULID
	Payload  T
	Carry    C
	Priority Priority
	RunCount int
	Failures int
	// Journal holds the job's recent journal entries, as [Run.History] does.
	Journal []JournalEntry
}

// Merge is a merge method's decision; build it with the methods of [Pending], and say how
// the pending job's due time moves with [Merge.Throttle], [Merge.Debounce] or
// [Merge.Earliest]:
//
//	return existing.Replace().Debounce(2*time.Second, 30*time.Second)
type Merge[T Task, C any] struct {
	decision Action
	task     T
	carry    C
	due      Due
	dueSet   bool
}

// DuePolicy says how a merge moves the pending job's due time (its RunAt).
type DuePolicy int8

// Due-time policies of a merge. Every merged journal entry names the one applied
// ([JournalEntry].Due) and the due time before and after it (DueBefore, DueAfter), all
// computed with the database clock.
const (
	// DueEarliest moves the due time to the earlier of the pending job's and the incoming
	// enqueue's (its [At] or [After], else now): a merge never delays the job. The default
	// of Replace and With, and of a type without a merge method.
	DueEarliest DuePolicy = iota
	// DueKeep leaves the due time as it is, whatever the incoming enqueue asked for:
	// throttling. Enqueue the first task of a window with [After](window) and every enqueue
	// until it runs merges into it, so a key runs at most once per window, with the latest
	// payload (Replace) or a combined one (With). The default of Keep.
	DueKeep
	// DueDebounce pushes the due time to now + Delay, so the job runs once the enqueues
	// have been quiet for Delay; with a MaxWait, never later than MaxWait after the burst
	// began (the job's creation, or the first debounced merge after a run), so a stream that
	// never quiets still runs at least every MaxWait.
	DueDebounce
)

// String returns the policy's name as journal entries record it: "earliest", "keep" or
// "debounce".
func (p DuePolicy) String() string {
	switch p {
	case DueEarliest:
		return "earliest"
	case DueKeep:
		return "keep"
	case DueDebounce:
		return "debounce"
	}
	return fmt.Sprintf("DuePolicy(%d)", int8(p))
}

// Due is a merge's due-time rule: its policy and, for DueDebounce, the quiet delay and the
// maximum wait (0: none).
type Due struct {
	Policy  DuePolicy
	Delay   time.Duration
	MaxWait time.Duration
}

// Throttle keeps the pending job's due time (DueKeep): the incoming enqueue's payload or
// merge result rides the run already scheduled. See [DueKeep].
func (m Merge[T, C]) Throttle() Merge[T, C] {
	m.due, m.dueSet = Due{Policy: DueKeep}, true
	return m
}

// Debounce pushes the pending job's due time to now + delay (database clock), but never
// beyond maxWait after the burst began; a maxWait of 0 sets no bound. See [DueDebounce].
// Enqueue the first task of a burst with [After](delay) too, so that a lone enqueue also
// waits for quiet. A negative delay or maxWait fails the enqueue.
func (m Merge[T, C]) Debounce(delay, maxWait time.Duration) Merge[T, C] {
	m.due, m.dueSet = Due{Policy: DueDebounce, Delay: delay, MaxWait: maxWait}, true
	return m
}

// Earliest moves the pending job's due time to the earlier of its own and the incoming
// enqueue's (DueEarliest), the default of Replace and With; with Keep it pulls a kept job
// forward without touching its payload.
func (m Merge[T, C]) Earliest() Merge[T, C] {
	m.due, m.dueSet = Due{Policy: DueEarliest}, true
	return m
}

// Due reports the decision's due-time rule, the default one when none was chosen.
func (m Merge[T, C]) Due() Due {
	if !m.dueSet && m.decision == ActionKept {
		return Due{Policy: DueKeep}
	}
	return m.due
}

// Decision reports the decision as the [Action] the enqueue will report: ActionKept,
// ActionReplaced, ActionMerged (With) or ActionIndependent.
func (m Merge[T, C]) Decision() Action { return m.decision }

// Task returns the payload a With decision stores (the zero value otherwise).
func (m Merge[T, C]) Task() T { return m.task }

// Carry returns the carry a With decision stores (the zero value otherwise).
func (m Merge[T, C]) Carry() C { return m.carry }

// Keep leaves the existing job as it is.
func (p Pending[T, C]) Keep() Merge[T, C] { return Merge[T, C]{decision: ActionKept} }

// Replace replaces the existing payload with the incoming task; the carry resets to its
// zero value.
func (p Pending[T, C]) Replace() Merge[T, C] { return Merge[T, C]{decision: ActionReplaced} }

// With replaces the existing job's payload and carry with the given values; the job keeps
// its ID, run count and journal and continues its work.
func (p Pending[T, C]) With(task T, carry C) Merge[T, C] {
	return Merge[T, C]{decision: ActionMerged, task: task, carry: carry}
}

// Independent enqueues the incoming task as a new job beside the existing one.
func (p Pending[T, C]) Independent() Merge[T, C] { return Merge[T, C]{decision: ActionIndependent} }

// MergeRule is a merge decision that does not look at the jobs: keep the pending job, or
// replace its payload, with a due-time rule. A task type declares one with a MergeRule
// method ([RuleMerger]) instead of a Merge method. A Go enqueue applies it as it applies a
// Merge method's decision. An enqueue from SQL (venturi_enqueue, see the README, "Enqueue
// from SQL") applies it in the database, at once: every worker that registers the kind
// records the rule in venturi_kind. A Merge method reads the pending job's payload and
// carry, which only Go can do: an enqueue from SQL that collides with a pending job of
// such a kind waits until a Go process that knows the type merges it.
//
//	func (SyncContacts) MergeRule() venturi.MergeRule { return venturi.ReplacePending().Throttle() }
type MergeRule struct {
	decision Action
	due      Due
	dueSet   bool
}

// KeepPending is the rule that leaves the pending job as it is (Pending.Keep); its due
// time stays unless the rule says otherwise ([DueKeep]).
func KeepPending() MergeRule { return MergeRule{decision: ActionKept} }

// ReplacePending is the rule that replaces the pending job's payload with the incoming
// task's, its carry reset (Pending.Replace); its due time moves to the earlier of the two
// unless the rule says otherwise ([DueEarliest]).
func ReplacePending() MergeRule { return MergeRule{decision: ActionReplaced} }

// Throttle keeps the pending job's due time ([DueKeep]).
func (r MergeRule) Throttle() MergeRule {
	r.due, r.dueSet = Due{Policy: DueKeep}, true
	return r
}

// Debounce pushes the pending job's due time to now + delay, but never beyond maxWait
// after the burst began; a maxWait of 0 sets no bound ([DueDebounce]). A negative delay
// or maxWait fails Register and every enqueue of the type.
func (r MergeRule) Debounce(delay, maxWait time.Duration) MergeRule {
	r.due, r.dueSet = Due{Policy: DueDebounce, Delay: delay, MaxWait: maxWait}, true
	return r
}

// Earliest moves the pending job's due time to the earlier of its own and the incoming
// enqueue's ([DueEarliest]).
func (r MergeRule) Earliest() MergeRule {
	r.due, r.dueSet = Due{Policy: DueEarliest}, true
	return r
}

// Decision reports the rule's decision: ActionKept or ActionReplaced (0 for the zero
// MergeRule, which Register refuses).
func (r MergeRule) Decision() Action { return r.decision }

// Due reports the rule's due-time rule, the default one when none was chosen.
func (r MergeRule) Due() Due {
	if !r.dueSet && r.decision == ActionKept {
		return Due{Policy: DueKeep}
	}
	return r.due
}

// RuleMerger is implemented by task types whose merge is a [MergeRule]. MergeRule is
// called on the zero value (the rule cannot depend on the payload). A type has a
// MergeRule method or a Merge method, not both.
type RuleMerger interface {
	MergeRule() MergeRule
}

// pendingFiller and mergeResult are implemented by every Pending and Merge instantiation;
// they let the type-erased enqueue path call a typed merge method.
type pendingFiller interface {
	fill(c *candidate) error
}

type mergeResult interface {
	result() (Action, Task, any, Due)
}

func (p *Pending[T, C]) fill(c *candidate) error {
	p.ID = c.id
	p.Priority = Priority(c.priority)
	p.RunCount = c.runs
	p.Failures = c.failures
	if err := json.Unmarshal(c.payload, &p.Payload); err != nil {
		return fmt.Errorf("decode pending payload: %w", err)
	}
	if len(c.carry) > 0 {
		if err := json.Unmarshal(c.carry, &p.Carry); err != nil {
			return fmt.Errorf("decode pending carry: %w", err)
		}
	}
	journal, err := decodeJournal(c.journal, c.moved)
	if err != nil {
		return fmt.Errorf("decode pending journal: %w", err)
	}
	p.Journal = journal
	return nil
}

func (m Merge[T, C]) result() (Action, Task, any, Due) {
	if m.decision == ActionMerged {
		return m.decision, m.task, m.carry, m.Due()
	}
	if m.decision == ActionIndependent && m.dueSet {
		return m.decision, nil, nil, Due{Policy: -1} // refused by merge
	}
	return m.decision, nil, nil, m.Due()
}

var mergers sync.Map

var (
	pendingFillerType = reflect.TypeFor[pendingFiller]()
	mergeResultType   = reflect.TypeFor[mergeResult]()
	ruleMergerType    = reflect.TypeFor[RuleMerger]()
)

// validate refuses a due rule the database cannot apply.
func (d Due) validate() error {
	switch {
	case d.Policy < DueEarliest || d.Policy > DueDebounce:
		return errors.New("venturi: merge set a due-time policy on Independent (a new job has its own due time)")
	case d.Delay < 0 || d.MaxWait < 0:
		return fmt.Errorf("venturi: Debounce(%v, %v): negative duration", d.Delay, d.MaxWait)
	}
	return nil
}
