package httpapi

import (
	"encoding/json"
	"time"

	"github.com/venturi-dev/venturi"
)

// Job is a venturi job's state and the latest entries of its journal.
type Job struct {
	ID       string          `json:"id"`
	Kind     string          `json:"kind"`
	State    string          `json:"state"`
	Runs     int             `json:"runs"`
	Failures int             `json:"failures"`
	RunAt    time.Time       `json:"run_at"`
	Carry    json.RawMessage `json:"carry,omitempty"`
	// Journal is the last MaxJournalEntries entries of the job's journal, oldest first.
	Journal []JournalEntry `json:"journal"`
	// JournalTotal is how many entries the journal has in all (more than len(Journal) when
	// older ones are not shown).
	JournalTotal int `json:"journal_total"`
	// Queue is the job's queue: "default", or "imports" for an import and the fetches of
	// the bookmarks it created.
	Queue string `json:"queue,omitempty"`
	// Partition is the host a fetch belongs to: fetches are polite per host, and each host
	// has its own circuit breaker (see bookmarks-worker/README.md, "Politeness").
	Partition string `json:"partition,omitempty"`
	// Circuit is the breaker of the job's host when it holds the pending job back (open,
	// or letting one probe through); absent otherwise.
	Circuit *Circuit `json:"circuit,omitempty"`
}

// Circuit is a host's circuit breaker that holds a pending fetch back: after too many
// failed fetches of the host in a row, its fetches wait until OpenUntil, then one probe
// fetch decides whether they resume.
type Circuit struct {
	// State is "open", "half_open" (the next claim runs the probe) or "probing".
	State string `json:"state"`
	// Failures is how many fetches of the host failed in a row.
	Failures int `json:"failures"`
	// OpenUntil is when the breaker lets a probe fetch through.
	OpenUntil *time.Time `json:"open_until,omitempty"`
}

// JournalEntry is one run (or merge) in a job's journal, as the API shows it: durations in
// milliseconds, and no worker IDs or fencing tokens (internal detail).
type JournalEntry struct {
	Event      string          `json:"event"`
	Run        int             `json:"run,omitempty"`
	Note       string          `json:"note,omitempty"`
	Attachment json.RawMessage `json:"attachment,omitempty"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	At         *time.Time      `json:"at,omitempty"`
	ResumeInMS int64           `json:"resume_in_ms,omitempty"`
	Merge      string          `json:"merge,omitempty"`
	// Wait names the signals a waiting job waits for (event waiting); ResumeInMS is then
	// the wait's timeout.
	Wait []string `json:"wait,omitempty"`
}

func toJob(j *venturi.Job) *Job {
	shown := j.Journal[max(0, len(j.Journal)-MaxJournalEntries):]
	out := &Job{ID: j.ID.String(), Kind: j.Kind, State: string(j.State), Runs: j.RunCount, Failures: j.Failures,
		RunAt: j.RunAt, Journal: make([]JournalEntry, len(shown)), JournalTotal: int(j.JournalLen)}
	if len(j.Carry) > 0 && string(j.Carry) != "null" {
		out.Carry = j.Carry
	}
	timeOrNil := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	for i, e := range shown {
		out.Journal[i] = JournalEntry{Event: string(e.Event), Run: e.Run, Note: e.Note, Attachment: e.Attachment,
			StartedAt: timeOrNil(e.StartedAt), At: timeOrNil(e.At), ResumeInMS: e.ResumeIn.Milliseconds(), Merge: e.Merge, Wait: e.Wait}
	}
	out.Queue, out.Partition = j.Queue, j.Partition
	pending := j.State == venturi.StateAvailable || j.State == venturi.StateScheduled
	if c := j.Circuit; c != nil && pending && c.State != venturi.CircuitClosed {
		out.Circuit = &Circuit{State: string(c.State), Failures: c.Failures, OpenUntil: c.OpenUntil}
	}
	return out
}

// Enqueued reports a job an endpoint enqueued or merged into.
type Enqueued struct {
	JobID  string `json:"job_id"`
	Action string `json:"action"` // inserted, replaced, merged, kept, independent
}
