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
	EventReplaced    Event = "replaced"    // SlotReplace: a newer job of the slot took over; the job is cancelled, not failed
	EventDropped     Event = "dropped"     // SlotDropIfRunning: the job's slot was full when it became runnable; cancelled
	EventCancelled   Event = "cancelled"   // Queue.Cancel, or the handler returned Cancelled; not a failure
	EventWaiting     Event = "waiting"     // the handler returned WaitForSignal; not a failure
)

// JournalEntry is the record of one run of a job (or of one merge into it). The journal
// is append-only and kept with the job until it is pruned, within a bound: see
// [JournalRecent] and [JournalMovedKept].
type JournalEntry struct {
	// Seq is the entry's number in the job's whole journal: 1 for its first entry. It is
	// not stored in the entry; it is the entry's position.
	Seq int64 `json:"-"`
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
	// Due is the due-time policy a merged entry applied ([DuePolicy]: "earliest", "keep"
	// or "debounce"), and DueBefore and DueAfter the job's due time before and after the
	// merge (database clock).
	Due       string    `json:"due,omitempty"`
	DueBefore time.Time `json:"due_before,omitzero"`
	DueAfter  time.Time `json:"due_after,omitzero"`
	// Wait names the signals a waiting entry's run waits for (ResumeIn is its timeout).
	Wait []string `json:"wait,omitempty"`
}

// The bound on what one job keeps. A job's row holds its most recent entries: when a write
// leaves more than JournalRecent there, all but the newest JournalRecentAfterMove move to
// the table venturi_journal, so each run costs the same however long the job has lived.
// venturi_journal keeps a job's newest JournalMovedKept moved entries; older ones are
// dropped and summarized ([JournalSummary], in [Job].JournalDropped). One job therefore
// keeps at most JournalRecent + JournalMovedKept entries, each at most [MaxNoteBytes] of
// note and [MaxAttachmentBytes] of attachment. The numbers are the schema's
// (schema/functions/venturi_journal_move.sql).
const (
	JournalRecent          = 32
	JournalRecentAfterMove = 16
	JournalMovedKept       = 1000
)

// MaxNoteBytes bounds a journal entry's note; a longer outcome note or error message is
// truncated (on a UTF-8 boundary) and marked so.
const MaxNoteBytes = 16 << 10

// MaxAttachmentBytes bounds a run's attachment, as encoded JSON; [Run.SetAttachment]
// refuses a larger one.
const MaxAttachmentBytes = 64 << 10

// JournalSummary counts the entries of a job's journal that were dropped past the bound
// (see [JournalMovedKept]).
type JournalSummary struct {
	// Entries is how many entries were dropped.
	Entries int64 `json:"entries"`
	// Events counts the dropped entries by event.
	Events map[Event]int64 `json:"events"`
	// FirstAt and LastAt are the At times of the oldest and newest dropped entries.
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
}

// decodeJournal decodes a job row's journal, whose first entry is number moved+1 of the
// job's whole journal.
func decodeJournal(b []byte, moved int64) ([]JournalEntry, error) {
	if len(b) == 0 || string(b) == "[]" { // a first run's journal is empty: skip the decoder
		return nil, nil
	}
	var entries []JournalEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, err
	}
	for i := range entries {
		entries[i].Seq = moved + int64(i) + 1
	}
	return entries, nil
}

// Failures counts the entries of a history that are failed runs (failed, dead and
// abandoned), the basis for a task's own give-up decision. It counts only the entries
// given: a run's History holds the recent ones; [Run.Failures] counts every failure.
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
