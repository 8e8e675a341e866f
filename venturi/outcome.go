package venturi

import (
	"fmt"
	"time"
)

type outcomeKind uint8

const (
	outcomeCompleted outcomeKind = iota
	outcomePause
	outcomeCancel
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

// Cancelled ends the job in [StateCancelled] with reason as its journal note: the handler
// decided the work should not happen (its subject is gone, say). It is not a failure and
// the job never runs again.
func Cancelled(reason string) Outcome { return Outcome{kind: outcomeCancel, note: reason} }

// IsCancel reports whether the outcome cancels the job.
func (o Outcome) IsCancel() bool { return o.kind == outcomeCancel }

// IsPause reports whether the outcome is a pause.
func (o Outcome) IsPause() bool { return o.kind == outcomePause }

// Note returns the outcome's note.
func (o Outcome) Note() string { return o.note }

// ResumeIn returns a pause's delay.
func (o Outcome) ResumeIn() time.Duration { return o.resumeIn }

// String describes the outcome.
func (o Outcome) String() string {
	switch o.kind {
	case outcomePause:
		return fmt.Sprintf("pause(%v, %q)", o.resumeIn, o.note)
	case outcomeCancel:
		return fmt.Sprintf("cancelled(%q)", o.note)
	}
	return fmt.Sprintf("completed(%q)", o.note)
}
