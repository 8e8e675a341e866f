package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// State is a job's lifecycle state.
type State string

// Lifecycle states; see the package documentation for the transitions.
const (
	StateScheduled State = "scheduled"
	StateAvailable State = "available"
	StateRunning   State = "running"
	StateCompleted State = "completed"
	StateDead      State = "dead"
	// StateCancelled is terminal: a slot policy ended the job (SlotDropIfRunning,
	// SlotReplace). It is not a failure.
	StateCancelled State = "cancelled"
	// StateWaiting: a run returned [WaitForSignal]; the job runs again when a signal it
	// waits for arrives ([Queue.Signal]) or its timeout (RunAt) passes.
	StateWaiting State = "waiting"
	// StateBlocked: a workflow's job waits for the nodes it needs ([Needs]); its
	// workflow releases it (available, or scheduled) or ends it cancelled without a run.
	StateBlocked State = "blocked"
)

// Job is a stored job as read back by [Queue.Job].
type Job struct {
	ID       ulid.ULID
	Kind     string
	State    State
	Priority Priority
	DedupKey DedupKey
	Payload  json.RawMessage
	Carry    json.RawMessage
	RunAt    time.Time
	RunCount int
	Failures int
	// Journal holds the job's most recent journal entries (at most [JournalRecent]),
	// oldest first; [Queue.Journal] pages through the older ones.
	Journal []JournalEntry
	// JournalLen is how many entries the job's journal has had in all, dropped ones
	// included: the Seq of its newest entry.
	JournalLen int64
	// JournalDropped summarizes the entries dropped past the bound; nil when none was.
	JournalDropped *JournalSummary
	CreatedAt      time.Time
	AttemptedAt    *time.Time
	FinishedAt     *time.Time
	// Queue is the job's queue.
	Queue string
	// Partition is the job's partition (see [Partitioner]); for a job with a slot and no
	// partition, its slot key.
	Partition string
	// Gated reports whether the job is claimed by the gated claim: it has a partition or
	// a slot, or its kind had limits when it was enqueued.
	Gated bool
	// Slot is the job's slot; nil when it takes none.
	Slot *Slot
	// StopRequested reports that the job's run was asked to stop: StopEvent says by whom
	// (EventReplaced: a newer job of its slot; EventCancelled: [Queue.Cancel]) and
	// StopNote why. Unless the run completes, the job ends cancelled.
	StopRequested bool
	StopEvent     Event
	StopNote      string
	// Owner is the ID of the worker running the job; empty unless State is running.
	Owner string
	// Singleton reports that the job is a singleton service's (see [Supervised]).
	Singleton bool
	// Meta is the job's metadata ([WithMeta], enqueue middleware); nil when it has none.
	Meta Meta
	// Circuit is the breaker the job reports to, read with the job by [Queue.Job]; nil when
	// its kind has no breaker (or it has not seen a claim). While it is open the job waits.
	Circuit *Circuit
}

// Job reads one job with its journal. It returns [ErrNotFound] for an unknown ID,
// including one whose job was pruned.
func (q *Queue) Job(ctx context.Context, id ulid.ULID) (*Job, error) {
	return q.jobIn(ctx, q.pool, id)
}

// jobIn is Job on db (a pool or a transaction).
func (q *Queue) jobIn(ctx context.Context, db dbsqlc.DBTX, id ulid.ULID) (*Job, error) {
	row, err := getJob(ctx, q.q, db, id)
	if err != nil {
		return nil, err
	}
	return jobFromRow(row)
}

// getJob reads job id wherever it is, pending first: a lookup in the history of finished
// jobs probes each of its partitions, which a pending job should not pay. Each read is a
// statement of its own, so a job that moves between them is looked for once more where it
// went (a finished job moved back by a bulk retry); ErrNotFound when it is in neither.
func getJob(ctx context.Context, q *dbsqlc.Queries, db dbsqlc.DBTX, id ulid.ULID) (*dbsqlc.GetJobRow, error) {
	row, err := q.GetJob(ctx, db, uuidOf(id))
	if !errors.Is(err, pgx.ErrNoRows) {
		return row, err
	}
	finished, err := q.GetFinishedJob(ctx, db, uuidOf(id))
	if err == nil {
		return (*dbsqlc.GetJobRow)(finished), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	row, err = q.GetJob(ctx, db, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return row, err
}

// jobFromRow converts a GetJob row.
func jobFromRow(row *dbsqlc.GetJobRow) (*Job, error) {
	j := &Job{
		ID: ulidOf(row.ID), Kind: row.Kind, State: State(row.State), Priority: Priority(row.Priority),
		DedupKey: DedupKey(row.DedupKey.String), Payload: row.Payload, Carry: row.Carry,
		RunAt: row.RunAt, RunCount: int(row.Runs), Failures: int(row.Failures),
		CreatedAt: row.CreatedAt, AttemptedAt: row.AttemptedAt, FinishedAt: row.FinishedAt,
		Queue: row.Queue, Partition: row.Part.String, Gated: row.Part.Valid, StopRequested: row.StopRequestedAt != nil,
		StopEvent: Event(row.StopEvent.String), StopNote: row.StopNote.String, Meta: decodeMeta(row.Meta),
	}
	if j.State == StateRunning {
		j.Owner = row.WorkerID.String
	}
	if row.HasBreaker {
		c := circuitOf(j.Kind, row.Part.String, row.BrkFails, row.BrkThreshold, row.BrkOpenUntil, row.BrkProbeUntil, row.BrkUpdatedAt)
		j.Circuit = &c
	}
	j.Singleton = row.SlotKey.Valid && strings.HasPrefix(row.SlotKey.String, SingletonSlotPrefix)
	if row.SlotKey.Valid {
		j.Slot = &Slot{Key: row.SlotKey.String, Limit: int(row.SlotLimit.Int32), Policy: SlotPolicy(row.SlotPolicy.Int16)}
	}
	if err := j.fillJournal(row.Journal, row.JournalMoved, row.JournalDropped); err != nil {
		return nil, err
	}
	return j, nil
}

// fillJournal decodes a row's journal columns into j.
func (j *Job) fillJournal(journal []byte, moved int64, dropped []byte) error {
	entries, err := decodeJournal(journal, moved)
	if err != nil {
		return fmt.Errorf("venturi: decode journal of %s: %w", j.ID, err)
	}
	// A finished job's row may hold one entry more than JournalRecent (its final one, added
	// as it moved to the history, where no trigger moves entries out): Job shows the most
	// recent ones; Queue.Journal pages through them all.
	j.Journal, j.JournalLen = entries[max(len(entries)-JournalRecent, 0):], moved+int64(len(entries))
	if len(dropped) > 0 {
		j.JournalDropped = new(JournalSummary)
		if err := json.Unmarshal(dropped, j.JournalDropped); err != nil {
			return fmt.Errorf("venturi: decode journal summary of %s: %w", j.ID, err)
		}
	}
	return nil
}

// MaxJournalPage bounds the entries one [Queue.Journal] call returns.
const MaxJournalPage = 1000

// Journal returns up to limit entries of job id's journal numbered below before (Seq <
// before), oldest first; before <= 0 reads from the newest entry. Page backwards by
// passing the first entry's Seq as the next call's before. The entries come from the
// job's row and from venturi_journal, read in one snapshot; an empty page means there is
// nothing older (entries dropped past the bound are only counted, in
// [Job].JournalDropped). limit <= 0 means 100; it is capped at [MaxJournalPage]. An
// unknown or pruned job has an empty journal.
func (q *Queue) Journal(ctx context.Context, id ulid.ULID, before int64, limit int) ([]JournalEntry, error) {
	return journalPage(ctx, q.pool, q.q, id, before, limit)
}

func journalPage(ctx context.Context, db dbsqlc.DBTX, q *dbsqlc.Queries, id ulid.ULID, before int64, limit int) ([]JournalEntry, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxJournalPage)
	p := dbsqlc.JournalPageParams{ID: uuidOf(id), Max: int32(limit)}
	if before > 0 {
		p.Before = pgtype.Int8{Int64: before, Valid: true}
	}
	rows, err := q.JournalPage(ctx, db, p)
	if err != nil {
		return nil, fmt.Errorf("venturi: journal of %s: %w", id, err)
	}
	out := make([]JournalEntry, len(rows))
	for i, r := range rows {
		e := &out[len(rows)-1-i] // rows come newest first
		if err := json.Unmarshal(r.Entry, e); err != nil {
			return nil, fmt.Errorf("venturi: decode journal entry %d of %s: %w", r.Seq, id, err)
		}
		e.Seq = r.Seq
	}
	return out, nil
}
