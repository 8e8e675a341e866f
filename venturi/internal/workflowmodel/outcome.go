package workflowmodel

import "fmt"

// The model's vocabulary: a node's policy, its outcomes and their classes, its state.

// Policy is what a job node needs of the nodes it depends on.
type Policy uint8

const (
	// Needs: every dependency succeeded (the default).
	Needs Policy = iota
	// NeedsEnded: every dependency ended, whatever its outcome.
	NeedsEnded
	// NeedsFailure: a dependency failed (compensation); skipped when none did.
	NeedsFailure
)

func (p Policy) String() string {
	switch p {
	case Needs:
		return "needs"
	case NeedsEnded:
		return "needs-ended"
	case NeedsFailure:
		return "needs-failure"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// Outcome is a node's own or propagated outcome.
type Outcome uint8

const (
	// None: not known yet.
	None Outcome = iota
	// OK: the job's run completed; a group: sealed.
	OK
	// Fail: the job's run ended dead.
	Fail
	// Cancel: the job was cancelled (by its run, an operator, or the workflow's cancel).
	Cancel
	// Del: the job was deleted while pending.
	Del
	// DFail: decided; something the node needs failed.
	DFail
	// DCancel: decided; something the node needs was cancelled or deleted.
	DCancel
	// Skip: decided; the node's policy cannot apply (every dependency skipped, or no
	// failure for a NeedsFailure node).
	Skip
)

var outcomeNames = [...]string{"", "ok", "fail", "cancel", "del", "dfail", "dcancel", "skip"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Class is an outcome's class, what the nodes that need it count.
type Class uint8

const (
	// ClassPending: no outcome yet.
	ClassPending Class = iota
	// ClassSuccess: OK.
	ClassSuccess
	// ClassFailure: Fail or DFail.
	ClassFailure
	// ClassCancel: Cancel, Del or DCancel.
	ClassCancel
	// ClassSkip: Skip.
	ClassSkip
)

// ClassOf returns o's class.
func ClassOf(o Outcome) Class {
	switch o {
	case OK:
		return ClassSuccess
	case Fail, DFail:
		return ClassFailure
	case Cancel, Del, DCancel:
		return ClassCancel
	case Skip:
		return ClassSkip
	}
	return ClassPending
}

// State is where a node's job stands.
type State uint8

const (
	// Blocked: waiting for what it needs (or a group not sealed).
	Blocked State = iota
	// Released: its job may run (available, scheduled, running, waiting).
	Released
	// Ended: its job ended by a run, a cancel or a delete.
	Ended
	// Decided: its job ended without a run, by the rules.
	Decided
	// Sealed: a group that takes no more members.
	Sealed
)

func (s State) String() string {
	return [...]string{"blocked", "released", "ended", "decided", "sealed"}[s]
}
