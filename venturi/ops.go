package venturi

// Operations API (issue 14): listing and acting on jobs over a filter, the stats table,
// explain, and the audit log. The dashboard (package dashboard), the venturi CLI
// (cmd/venturi) and the OpenTelemetry adapter (module venturiotel) are built on these
// methods only.
//
// The methods live beside their topics: ops_filter.go (the filter grammar), ops_list.go
// (ListJobs), ops_detail.go (JobDetail), ops_bulk.go (the bulk actions), ops_audit.go (the
// audit log, ResetCircuit), ops_circuits.go (ListCircuits, the breakers a page at a time),
// ops_stats.go (the sampler, Stats, StatsHistory) and
// ops_explain.go (Explain, ExplainJob).

import (
	"encoding/json"
	"time"

	"github.com/oklog/ulid/v2"
)

// ---- filters -----------------------------------------------------------------------

// JobFilter selects jobs for [Queue.ListJobs] and the bulk actions. Zero fields match
// everything; the fields that are set must all hold (AND); the values of a list field are
// alternatives (OR). [ParseJobFilter] reads the text grammar that the CLI and the
// dashboard share, and String writes it back.
type JobFilter struct {
	IDs    []ulid.ULID
	States []State
	Kinds  []string
	Queues []string
	// Workflow matches the jobs of one workflow (or batch); zero for any. Its pending jobs
	// are found through their workflow index, its finished ones through the workflow's
	// nodes: the finished jobs of a workflow that retention pruned are not found.
	Workflow ulid.ULID
	// DedupKey matches the job's dedup key exactly.
	DedupKey DedupKey
	// CreatedAfter and CreatedBefore bound the job's creation time (database clock,
	// created_at), inclusive after, exclusive before; zero for no bound.
	CreatedAfter, CreatedBefore time.Time
	// CreatedWithin matches jobs created less than this long before the database's now().
	CreatedWithin time.Duration
	// Note matches jobs whose recent journal (the entries in the job's row, at most
	// JournalRecent) has a note containing this text, case-insensitively.
	Note string
	// Payload: each match must hold in the job's payload.
	Payload []PathMatch
	// Attachment: each match must hold in the attachment of some entry of the job's
	// recent journal.
	Attachment []PathMatch
}

// PathMatch compares the JSON value at Path (object keys, or array indexes written as
// decimal numbers) with Value: a string value compares as its text, any other value as
// its JSON text (42, true, null).
type PathMatch struct {
	Path  []string
	Value string
}

// ---- listing -------------------------------------------------------------------------

// JobSummary is one job in a list: the columns a list shows, without payload or journal.
type JobSummary struct {
	ID          ulid.ULID
	Kind        string
	Queue       string
	State       State
	Priority    Priority
	DedupKey    DedupKey
	Partition   string
	RunAt       time.Time
	RunCount    int
	Failures    int
	CreatedAt   time.Time
	AttemptedAt *time.Time
	FinishedAt  *time.Time
	// LastEvent and LastNote are the newest journal entry's event and note.
	LastEvent Event
	LastNote  string
	// Owner is the worker running it; empty unless State is running.
	Owner         string
	StopRequested bool
}

// JobPage is one page of [Queue.ListJobs].
type JobPage struct {
	Jobs []JobSummary
	// Next is the cursor of the next page; empty on the last page.
	Next string
	// Partial reports that the page ended at its search window ([ListSearchWindow]) before
	// it was full: the filter has a predicate no index serves (note, payload, attachment),
	// and Next searches on after the jobs read so far. Jobs may hold fewer than the page's
	// limit, or none.
	Partial bool
}

// MaxListPage bounds one page of [Queue.ListJobs].
const MaxListPage = 500

// ---- one job -------------------------------------------------------------------------

// JobDetail is one job with everything kept about it, as [Queue.JobDetail] reads it.
type JobDetail struct {
	Job
	// Runs is the job's timeline: one entry per run, oldest first, from its journal.
	Runs    []RunRecord
	Steps   []StepRecord
	Signals []SignalRecord
	Hooks   []HookRecord
	// Explain says what holds the job back and what happens next.
	Explain *JobExplanation
	// Workflow is the workflow (or batch) and node the job is a member of; nil outside
	// workflows (or when its workflow was pruned).
	Workflow *JobWorkflow
}

// RunRecord is one run of a job, from its journal.
type RunRecord struct {
	Run        int
	Worker     string
	StartedAt  time.Time
	EndedAt    time.Time
	Duration   time.Duration
	Event      Event // how the run ended
	Note       string
	Attachment json.RawMessage
	ResumeIn   time.Duration
}

// SignalRecord is one signal sent to a job.
type SignalRecord struct {
	Signal
	// ConsumedAt is when the run that read it ended; nil while it is pending.
	ConsumedAt *time.Time
}

// HookRecord is one hook of a job: never its token.
type HookRecord struct {
	Name       string
	Reusable   bool
	CreatedAt  time.Time
	ExpiresAt  time.Time
	UsedAt     *time.Time
	DisposedAt *time.Time
}

// ---- bulk actions -------------------------------------------------------------------

// MaxBulkJobs is the most jobs one bulk action changes; BulkResult.More says that more
// matched.
const MaxBulkJobs = 100_000

// BulkOptions qualify a bulk action.
type BulkOptions struct {
	// DryRun counts what the action would change and changes nothing (and writes no
	// audit entry). It counts in one statement instead of walking: Matched is every
	// matching job, up to CountMax (CountStopped and More when it stopped there),
	// Eligible those the action applies to, up to Limit (More when more are).
	DryRun bool
	// Limit is the most jobs to change; 0 or more than MaxBulkJobs means MaxBulkJobs.
	Limit int
	// CountMax bounds a dry run's count: it stops at this many matching jobs
	// (BulkResult.CountStopped), so that its time stays bounded (a count reads each
	// match's row: about 7 µs each). 0, or more than twice MaxBulkJobs, means twice
	// MaxBulkJobs. The dashboard counts at most 5,000.
	CountMax int
	// Reason is written in each changed job's journal and in the audit entry.
	Reason string
}

// BulkResult is what a bulk action did (or, on a dry run, would do).
type BulkResult struct {
	// Matched is how many jobs the filter matched; Eligible how many of them are in a
	// state the action applies to; Changed how many it changed (0 on a dry run).
	Matched, Eligible, Changed int
	// More reports that the limit stopped the action with eligible jobs left.
	More bool
	// AuditID is the audit entry's ID; 0 on a dry run.
	AuditID int64
	// CountStopped reports that a dry run's count stopped at BulkOptions.CountMax: at
	// least Matched jobs match (and More is set).
	CountStopped bool
}

// ---- audit ---------------------------------------------------------------------------

// AuditEntry is one recorded operator action.
type AuditEntry struct {
	ID     int64
	At     time.Time // database clock
	Actor  string
	Action string // jobs.retry, jobs.cancel, jobs.delete, queue.pause, queue.resume, queue.concurrency, cron.pause, cron.resume, cron.remove, circuit.reset
	Target string // the filter of a bulk action, or the queue, schedule or circuit acted on
	Count  int    // jobs changed by a bulk action
	Reason string
}

// ---- stats ---------------------------------------------------------------------------

// Stats is the latest sample of the stats table, written by the maintaining worker every
// Config.StatsInterval, and the enqueues from SQL that wait for a Go merge. Reading it never
// counts jobs.
type Stats struct {
	// SampledAt is the sample's time (database clock); zero when no worker has sampled.
	SampledAt time.Time
	Queues    []QueueStats
	// DeferredMerges lists, by kind, the enqueues from SQL that wait for a Go merge
	// (venturi_deferred_merge: a collision with a pending job of a kind whose merge is Go
	// code), read live when Stats is called, not from the sample. It is empty while workers
	// that registered those kinds keep up: a count that stays up, or an oldest age that
	// grows, means that no running worker registered the kind.
	DeferredMerges []DeferredMergeStats
}

// DeferredMergeStats is one kind's enqueues from SQL that wait for a worker that knows the
// kind to merge them (see "SQL API" in the README).
type DeferredMergeStats struct {
	Kind string
	// Waiting is how many enqueues wait; Keys is how many dedup keys they are of.
	Waiting, Keys int64
	// Oldest is when the longest waiting one was enqueued, and OldestAge its age when Stats
	// read it, both by the database clock.
	Oldest    time.Time
	OldestAge time.Duration
}

// QueueStats is one queue's line of a stats sample.
type QueueStats struct {
	Queue       string
	Paused      bool
	Concurrency int
	// Counts holds the queue's jobs by state.
	Counts map[State]int64
	// OldestAvailable is the due time of its oldest available job; Lag is SampledAt minus
	// it (0 when none is available).
	OldestAvailable *time.Time
	Lag             time.Duration
	// Per second over the last sample interval: jobs completed; failed runs that the job
	// survived (retried: an error, a timeout, a panic, an abandoned lease); jobs dead (the
	// failure that sent a job to dead counts here, not in FailedPerSec).
	CompletedPerSec, FailedPerSec, DeadPerSec float64
	Kinds                                     []KindStats
}

// KindStats is one kind's line within a queue's stats.
type KindStats struct {
	Kind                                      string
	Counts                                    map[State]int64
	CompletedPerSec, FailedPerSec, DeadPerSec float64
}

// StatsSample is one queue's counts and rates at one sample time, for charts.
type StatsSample struct {
	At                                        time.Time
	Queue                                     string
	Available, Running, Scheduled, Waiting    int64
	Lag                                       time.Duration
	CompletedPerSec, FailedPerSec, DeadPerSec float64
}

// ---- explain -------------------------------------------------------------------------

// Explanation is what an enqueue of a task would do now ([Queue.Explain]).
type Explanation struct {
	Kind     string
	Queue    string
	Priority Priority
	DedupKey DedupKey
	// Action is what the enqueue would do: ActionInserted for a new job, or the merge's
	// decision against Pending.
	Action Action
	// Pending is the pending job the enqueue would meet; nil when none.
	Pending *Job
	// Job is the job as the enqueue would leave it.
	Job *Job
	// Due is when it would be due (database clock).
	Due time.Time
	// Retries is its retry schedule: the delay after each failure (with the job's own
	// jitter) until the backstop.
	Retries []time.Duration
	// Notes says in words what else applies: a paused queue, an open circuit, a full slot.
	Notes []string
}

// JobExplanation says why a job is where it is and what happens next.
type JobExplanation struct {
	// Reasons, in words: "due in 3m12s", "queue paused", "slot host:x full (2 of 2
	// running)", "circuit fetch/x open until …", "rate 1/s per partition: next start in
	// 400ms", "waiting for signal confirm (timeout in 1h)".
	Reasons []string
	// Retries is the rest of its retry schedule: the delay after each further failure,
	// with the job's jitter, until the backstop.
	Retries []time.Duration
}
