package venturi

import (
	"encoding/json"
	"time"
)

// Event names what a journal entry records.
type Event string

// Journal events. Every run ends in exactly one of completed, paused, failed, dead,
// abandoned or interrupted; merged entries record dedup decisions between runs.
const (
	EventCompleted   Event = "completed"   // the handler returned Completed
	EventPaused      Event = "paused"      // the handler returned Pause; not a failure
	EventFailed      Event = "failed"      // a retryable error; the job was rescheduled with backoff
	EventDead        Event = "dead"        // a permanent error, an undecodable payload or carry, or the backstop
	EventAbandoned   Event = "abandoned"   // the lease expired (the worker died or stalled); counts as a failure
	EventInterrupted Event = "interrupted" // graceful shutdown cut the run; not a failure
	EventMerged      Event = "merged"      // an enqueue merged into this pending job
)

// JournalEntry is the record of one run of a job (or of one merge into it). The journal
// is append-only and kept with the job until it is pruned.
type JournalEntry struct {
	// Event is how the run ended.
	Event Event `json:"event"`
	// Run is the run's number (1 for the first execution); zero for merged entries.
	Run int `json:"run,omitempty"`
	// Note is the run's conclusion: the outcome's note, or the error's message.
	Note string `json:"note,omitempty"`
	// Attachment is the structured evidence the handler set with [Run.SetAttachment].
	Attachment json.RawMessage `json:"attachment,omitempty"`
	// Token is the run's fencing token.
	Token int64 `json:"token,omitempty"`
	// Worker is the ID of the worker that ran it.
	Worker string `json:"worker,omitempty"`
	// StartedAt is when the run was claimed (database clock).
	StartedAt time.Time `json:"started_at,omitzero"`
	// At is when the run ended: StartedAt plus the duration the worker measured (its
	// monotonic clock) from receiving the claim to the handler's return. It never runs
	// ahead of the database clock by more than the clocks' drift over the run, and it is
	// not when the entry was written, which may be later (results are written in
	// batches). Merged and abandoned entries carry the database time of their write.
	At time.Time `json:"at,omitzero"`
	// ResumeIn is the requested delay of a pause or the backoff of a retry.
	ResumeIn time.Duration `json:"resume_in,omitempty"`
	// Merge is the decision of a merged entry.
	Merge string `json:"merge,omitempty"`
}

// Failures counts the entries of a history that are failed runs (failed, dead and
// abandoned), the basis for a task's own give-up decision.
func Failures(history []JournalEntry) int {
	n := 0
	for _, e := range history {
		switch e.Event {
		case EventFailed, EventDead, EventAbandoned:
			n++
		}
	}
	return n
}
