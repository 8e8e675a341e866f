package venturi

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Bounds of [Queue.JobDetail].
const (
	// DetailJournalEntries is how many of a job's newest journal entries JobDetail reads
	// for its runs (the row's and the moved ones); Queue.Journal pages through the rest.
	DetailJournalEntries = 256
	// DetailMaxRecords bounds each of JobDetail's signals and hooks (oldest first).
	DetailMaxRecords = 1000
)

// JobDetail reads one job with its runs, memoized steps, signals and hooks, and an
// explanation of what holds it back. [ErrNotFound] for an unknown or pruned job.
//
// Everything is read in one snapshot. Runs come from the job's newest
// DetailJournalEntries journal entries (its row's and those moved to venturi_journal):
// each entry that ended a run (completed, paused, failed, dead, abandoned, interrupted,
// replaced, cancelled or waiting, with a run number) is one RunRecord; merges, operator
// retries and cancels of pending jobs are not runs. Signals and hooks are the first
// DetailMaxRecords of each; a hook's token is never read. Workflow names the workflow
// and node of a workflow's (or batch's) job.
func (q *Queue) JobDetail(ctx context.Context, id ulid.ULID) (*JobDetail, error) {
	var d *JobDetail
	err := q.readJob(ctx, id, func(tx pgx.Tx, j *Job) error {
		d = &JobDetail{Job: *j}
		entries, err := journalPage(ctx, tx, q.q, id, 0, DetailJournalEntries)
		if err != nil {
			return err
		}
		d.Runs = runsOf(entries)
		steps, err := q.q.JobSteps(ctx, tx, uuidOf(id))
		if err != nil {
			return err
		}
		for _, r := range steps {
			d.Steps = append(d.Steps, StepRecord{Name: r.Name, Result: r.Result, Run: int(r.Run), At: r.At})
		}
		if d.Signals, err = q.jobSignals(ctx, tx, id); err != nil {
			return err
		}
		hooks, err := q.q.JobHooks(ctx, tx, dbsqlc.JobHooksParams{ID: uuidOf(id), Max: DetailMaxRecords})
		if err != nil {
			return err
		}
		for _, h := range hooks {
			d.Hooks = append(d.Hooks, HookRecord{Name: h.Name, Reusable: h.Reusable, CreatedAt: h.CreatedAt,
				ExpiresAt: h.ExpiresAt, UsedAt: h.UsedAt, DisposedAt: h.DisposedAt})
		}
		d.Explain, d.Workflow, err = q.explainJob(ctx, tx, j)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (q *Queue) jobSignals(ctx context.Context, db dbsqlc.DBTX, id ulid.ULID) ([]SignalRecord, error) {
	rows, err := q.q.JobSignals(ctx, db, dbsqlc.JobSignalsParams{ID: uuidOf(id), Max: DetailMaxRecords})
	if err != nil {
		return nil, err
	}
	out := make([]SignalRecord, len(rows))
	for i, r := range rows {
		out[i] = SignalRecord{Signal: Signal{Seq: r.Seq, Name: r.Name, Payload: r.Payload, DeliveryID: r.DeliveryID,
			SentAt: r.SentAt}, ConsumedAt: r.ConsumedAt}
	}
	return out, nil
}

// runsOf turns journal entries (oldest first) into the runs they end.
func runsOf(entries []JournalEntry) []RunRecord {
	var runs []RunRecord
	for _, e := range entries {
		if e.Run <= 0 {
			continue // a merge, a retry, a cancel of a pending job, a dropped job: not a run
		}
		r := RunRecord{Run: e.Run, Worker: e.Worker, StartedAt: e.StartedAt, EndedAt: e.At, Event: e.Event,
			Note: e.Note, Attachment: e.Attachment, ResumeIn: e.ResumeIn}
		if !e.StartedAt.IsZero() && !e.At.IsZero() && e.At.After(e.StartedAt) {
			r.Duration = e.At.Sub(e.StartedAt)
		}
		runs = append(runs, r)
	}
	return runs
}

// readJob reads job id and runs fn on it in one read-only snapshot.
func (q *Queue) readJob(ctx context.Context, id ulid.ULID, fn func(pgx.Tx, *Job) error) error {
	return pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		j, err := q.jobIn(ctx, tx, id)
		if err != nil {
			return err
		}
		return fn(tx, j)
	})
}
