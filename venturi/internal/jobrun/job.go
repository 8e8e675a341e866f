package jobrun

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/journalenc"
)

// Job is a job as a claim returned it.
type Job struct {
	// ID is the job's ID.
	ID ulid.ULID
	// Kind is the job's kind.
	Kind string
	// Queue is the queue it was claimed from.
	Queue string
	// MetaJSON is its metadata column (nil or JSON null: none; "?": not read yet).
	MetaJSON []byte
	// Meta is MetaJSON decoded, set before its run starts.
	Meta map[string]string
	// Payload is the job's payload (JSON).
	Payload []byte
	// Carry is the carry its last run stored (JSON; nil: none).
	Carry []byte
	// Runs is the run's number (1 for the first).
	Runs int
	// Failures counts the job's failed runs before this one.
	Failures int
	// Token is the run's lease (fencing) token.
	Token int64
	// Journal is the journal's recent entries, as stored in the row.
	Journal []byte
	// JournalMoved is how many entries moved out of the row before them.
	JournalMoved int64
	// Started is attempted_at: the claim's database time.
	Started time.Time
	// Due is run_at when claimed: the job's due time (database clock).
	Due time.Time
	// Sent is the local clock when the claim was sent: the lease runs from here at the
	// latest.
	Sent time.Time
	// Received is the local clock when the claim's rows arrived: the run's duration runs
	// from here.
	Received time.Time
	// Breaker is the breaker the run reports to ("": none).
	Breaker string
	// Gated reports whether the gated claim claimed it: finishing it may free a gate.
	Gated bool
	// Stop is the run's stop signal (Run.Shutdown).
	Stop *Stop
	// StopEvent is set when the run was asked to stop: "replaced" or "cancelled".
	StopEvent atomic.Pointer[string]
}

// Stop is one run's stop signal: closed when the worker shuts down, or when the run is
// asked to stop (a newer job of its slot replaces it, or its job is cancelled).
type Stop struct {
	once sync.Once
	ch   chan struct{}
}

// NewStop returns an open stop signal.
func NewStop() *Stop { return &Stop{ch: make(chan struct{})} }

// Close closes the signal; closing it again does nothing.
func (s *Stop) Close() { s.once.Do(func() { close(s.ch) }) }

// Done returns a channel closed when the signal is.
func (s *Stop) Done() <-chan struct{} { return s.ch }

// End is the end of one run, as the FinishRuns statement takes it.
type End struct {
	// Job is the run's job as it was claimed.
	Job *Job
	// State is the job's next state.
	State dbsqlc.VenturiJobState
	// Delay is how long until the job is due again (a pause, a retry's backoff, a wait's
	// timeout).
	Delay time.Duration
	// Failed reports whether the run counts as a failure.
	Failed bool
	// SetCarry says to store Carry as the job's carry.
	SetCarry bool
	// Carry is the carry to store (JSON), when SetCarry.
	Carry []byte
	// Entry is the run's journal entry; the completer adds the run, token, worker and
	// times.
	Entry journalenc.Entry
	// Ended is the local clock when the run ended.
	Ended time.Time
	// Wait names the signals a waiting job waits for.
	Wait []string
	// Consumed are the sequence numbers of the signals the run read (Run.Signals).
	Consumed []int64
	// Finalized reports that Run.CompleteTx wrote the end in the handler's transaction.
	Finalized bool
	// Lost reports that the lease was lost: write nothing.
	Lost bool
	// Degraded reports that the database refused the full result: it is stored without
	// carry and attachment (and a completion that carried a Flow ends dead instead).
	Degraded bool
	// Flow is what a workflow member's completion writes beside its end; nil for most.
	Flow *Flow
}

// Flow is what a completed run of a workflow's job writes in its finish's transaction
// (venturi's Run.SetOutput and Run.Spawn), only when its token still matched.
type Flow struct {
	// Output is the run's output (JSON) for its node; nil: none.
	Output []byte
	// Workflow is the workflow Attach adds nodes to: the finish holds its row against a
	// settle (ShareWorkflows) before it writes the end, so no settle sees the end
	// without the nodes. Zero without Attach.
	Workflow pgtype.UUID
	// Attach writes the nodes and jobs the run spawned; nil: none.
	Attach func(ctx context.Context, tx pgx.Tx) error
}
