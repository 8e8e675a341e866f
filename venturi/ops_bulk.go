package venturi

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// EventRetried is the journal event of a job that an operator retried ([Queue.RetryJobs]):
// its note names the actor and the reason. Not a run.
const EventRetried Event = "retried"

// bulkBatch is how many jobs a bulk action reads and changes per transaction: no
// transaction holds more row locks than this.
const bulkBatch = 1000

// bulkAction is what a bulk action does to one batch of jobs.
type bulkAction struct {
	audit    string
	eligible func(r *listRow) bool
	// apply changes the eligible jobs of a batch in tx and returns how many changed.
	apply func(ctx context.Context, q *Queue, tx pgx.Tx, ids []pgtype.UUID, note string) (int64, error)
	// note is the journal note of a changed job.
	note func(actor, reason string) string
}

// RetryJobs makes the matching dead, cancelled, completed and scheduled jobs available
// now. A retried job's failure count restarts at 0 (the backstop gives it its attempts
// again); its journal keeps its history and gains a "retried" entry with the actor and
// reason. Running and waiting jobs are not eligible, nor the finished jobs of a supervised
// singleton (its workers ensure its live job). The workers of the retried kinds are
// notified: the jobs run at once.
//
// Like every bulk action, it walks the matching jobs in the filter's listing order
// ([Queue.ListJobs]) a batch of 1,000 at a time, each batch changed in its own short
// transaction, so no transaction holds more than 1,000 row locks. A job that changed state
// between the walk and its batch's change is skipped (the change re-reads each row under
// its lock), never corrupted. The audit entry (one per action, [WithActor]) is written
// with the first batch and counts each batch's changes in the batch's transaction. The
// walk stops at o.Limit eligible jobs (BulkResult.More tells that more remain); Matched
// and Eligible count the jobs it walked.
func (q *Queue) RetryJobs(ctx context.Context, f JobFilter, o BulkOptions) (BulkResult, error) {
	return q.bulk(ctx, f, o, bulkAction{
		audit: AuditJobsRetry,
		eligible: func(r *listRow) bool {
			switch State(r.State) {
			case StateScheduled:
				return true
			case StateDead, StateCancelled, StateCompleted:
				return !strings.HasPrefix(r.Part.String, SingletonSlotPrefix)
			}
			return false
		},
		note: func(actor, reason string) string { return joinNote("retried by "+actor, reason) },
		apply: func(ctx context.Context, q *Queue, tx pgx.Tx, ids []pgtype.UUID, note string) (int64, error) {
			var changed int64
			var kinds []string
			err := untilSettled(ids, func(ids []pgtype.UUID) ([]pgtype.UUID, error) {
				row, err := q.q.RetryJobs(ctx, tx, dbsqlc.RetryJobsParams{Ids: ids, Note: note})
				changed += row.Changed
				kinds = append(kinds, row.Kinds...)
				return row.Ids, err
			})
			if err != nil || changed == 0 || q.poll {
				return changed, err
			}
			// The jobs are available now: wake the workers of their kinds when tx commits.
			slices.Sort(kinds)
			return changed, q.q.NotifyMany(ctx, tx, dbsqlc.NotifyManyParams{Channel: q.channel, Payloads: slices.Compact(kinds)})
		},
	})
}

// CancelJobs cancels the matching jobs as [Queue.Cancel] does (pending ones end
// cancelled, running ones are asked to stop). Finished jobs are not eligible. A running
// job counts as changed when its run is asked to stop (not when it already was); its run
// sees Run.Shutdown, and its late writes are fenced as for Queue.Cancel. See
// [Queue.RetryJobs] for how a bulk action walks, batches and audits.
func (q *Queue) CancelJobs(ctx context.Context, f JobFilter, o BulkOptions) (BulkResult, error) {
	return q.bulk(ctx, f, o, bulkAction{
		audit: AuditJobsCancel,
		eligible: func(r *listRow) bool {
			switch State(r.State) {
			case StateScheduled, StateAvailable, StateWaiting, StateRunning, StateBlocked:
				return true
			}
			return false
		},
		note: func(actor, reason string) string { return cancelNote(joinNote("cancelled by "+actor, reason)) },
		apply: func(ctx context.Context, q *Queue, tx pgx.Tx, ids []pgtype.UUID, note string) (int64, error) {
			return cancelJobs(ctx, tx, q.q, notifyChannelOf(q.poll, q.channel), ids, note)
		},
	})
}

// cancelJobs cancels jobs in tx as Queue.Cancel does: it locks their rows (in ID order),
// cancels them in a statement whose snapshot sees them as locked, and tells the running
// ones to stop on channel ("": none, the lease extension delivers it). It returns how many
// ended or were asked to stop.
func cancelJobs(ctx context.Context, tx pgx.Tx, q *dbsqlc.Queries, channel string, ids []pgtype.UUID, note string) (int64, error) {
	if _, err := q.LockJobs(ctx, tx, ids); err != nil {
		return 0, err
	}
	row, err := q.CancelLocked(ctx, tx, dbsqlc.CancelLockedParams{Ids: ids, Note: note})
	if err != nil || len(row.Asked) == 0 || channel == "" {
		return row.Ended + int64(len(row.Asked)), err
	}
	stops := make([]string, len(row.Asked))
	for i, id := range row.Asked {
		stops[i] = stopPrefix + string(EventCancelled) + ":" + uuidText(ulidOf(id))
	}
	return row.Ended + int64(len(row.Asked)), q.NotifyMany(ctx, tx, dbsqlc.NotifyManyParams{Channel: channel, Payloads: stops})
}

// DeleteJobs deletes the matching jobs that are not running, with their journals, steps,
// signals and hooks. See [Queue.RetryJobs] for how a bulk action walks, batches and
// audits.
func (q *Queue) DeleteJobs(ctx context.Context, f JobFilter, o BulkOptions) (BulkResult, error) {
	return q.bulk(ctx, f, o, bulkAction{
		audit:    AuditJobsDelete,
		eligible: func(r *listRow) bool { return State(r.State) != StateRunning },
		note:     func(string, string) string { return "" },
		apply: func(ctx context.Context, q *Queue, tx pgx.Tx, ids []pgtype.UUID, _ string) (int64, error) {
			var deleted int64
			err := untilSettled(ids, func(ids []pgtype.UUID) ([]pgtype.UUID, error) {
				row, err := q.q.DeleteJobs(ctx, tx, ids)
				deleted += row.Deleted
				return row.Ids, err
			})
			return deleted, err
		},
	})
}

// untilSettled runs a bulk statement (do, which returns the IDs it changed) over ids, then
// once more over those it did not change: a job that moved between venturi_job and the
// history while the first statement ran (the retention duty's sweep of ended jobs) is in
// neither table as that statement sees them, and in one as the next sees them. A job the
// second statement does not change either was skipped for its state.
func untilSettled(ids []pgtype.UUID, do func([]pgtype.UUID) ([]pgtype.UUID, error)) error {
	done, err := do(ids)
	if err != nil || len(done) == len(ids) {
		return err
	}
	changed := make(map[pgtype.UUID]bool, len(done))
	for _, id := range done {
		changed[id] = true
	}
	var left []pgtype.UUID
	for _, id := range ids {
		if !changed[id] {
			left = append(left, id)
		}
	}
	_, err = do(left)
	return err
}

// joinNote is "what: reason", or what alone.
func joinNote(what, reason string) string {
	if reason == "" {
		return what
	}
	return what + ": " + reason
}

// bulk walks f's jobs in its listing order and applies a to the eligible ones, a batch per
// transaction.
func (q *Queue) bulk(ctx context.Context, f JobFilter, o BulkOptions, a bulkAction) (BulkResult, error) {
	var res BulkResult
	if err := f.validate(); err != nil {
		return res, err
	}
	limit := o.Limit
	if limit <= 0 || limit > MaxBulkJobs {
		limit = MaxBulkJobs
	}
	reason := cutText(strings.TrimSpace(o.Reason), MaxReasonBytes)
	note := cutText(a.note(actorOf(ctx), reason), MaxNoteBytes)
	order, state := orderOf(&f), State("")
	if len(f.States) == 1 {
		state = f.States[0]
	}
	if o.DryRun {
		countMax := bulkCountMax
		if o.CountMax > 0 {
			countMax = min(o.CountMax, bulkCountMax)
		}
		return q.bulkCount(ctx, &f, limit, countMax, a)
	}
	var cur *listCursor
	for !res.More {
		var rows []*listRow
		var edge *listRow
		err := q.readTx(ctx, func(tx pgx.Tx) (err error) {
			rows, edge, err = q.listAfter(ctx, tx, &f, cur, bulkBatch, false)
			return err
		})
		if err != nil {
			return res, err
		}
		switch {
		case edge != nil: // a search window without a full batch: walk on after it
			cur = cursorAfter(order, state, edge)
		case len(rows) == 0:
			cur = nil
		default:
			cur = cursorAfter(order, state, rows[len(rows)-1])
		}
		if cur == nil {
			break
		}
		var ids []pgtype.UUID
		for _, r := range rows {
			if a.eligible(r) {
				if res.Eligible == limit {
					res.More = true
					break
				}
				res.Eligible++
				ids = append(ids, r.ID)
			}
			res.Matched++
		}
		if len(ids) == 0 {
			continue
		}
		n, err := q.bulkBatch(ctx, a, ids, note, f.String(), reason, &res)
		if err != nil {
			return res, err
		}
		res.Changed += int(n)
	}
	if !o.DryRun && res.AuditID == 0 { // nothing was eligible: the action is still recorded
		id, err := q.audit(ctx, q.pool, a.audit, f.String(), 0, reason)
		if err != nil {
			return res, err
		}
		res.AuditID = id
	}
	return res, nil
}

// bulkCountMax is how many matching jobs a dry run counts at most by default: twice the
// most a bulk action changes, so that an action over mostly ineligible jobs still counts
// its eligible ones.
const bulkCountMax = 2 * MaxBulkJobs

// bulkCount is a's dry run over f: one statement that counts the matching jobs by state
// (CountMatchingJobs), bounded by ListTimeout, instead of the action's walk. Matched is
// every matching job (at most countMax: CountStopped and More when the count stopped
// there), Eligible those of them a applies to, at most limit (More when more are).
func (q *Queue) bulkCount(ctx context.Context, f *JobFilter, limit, countMax int, a bulkAction) (BulkResult, error) {
	var res BulkResult
	lp := listParams(f, false)
	var one dbsqlc.NullVenturiJobState
	if len(f.States) == 1 {
		one = dbsqlc.NullVenturiJobState{VenturiJobState: dbsqlc.VenturiJobState(f.States[0]), Valid: true}
	}
	var counts []*dbsqlc.CountMatchingJobsRow
	err := q.readTx(ctx, func(tx pgx.Tx) (err error) {
		counts, err = q.q.CountMatchingJobs(ctx, tx, dbsqlc.CountMatchingJobsParams{
			SingletonPrefix: SingletonSlotPrefix, Max: int32(countMax), OneState: one,
			Ids: lp.Ids, States: lp.States, Kinds: lp.Kinds, Queues: lp.Queues, DedupKey: lp.DedupKey, KeySearch: lp.KeySearch,
			HasWorkflow: lp.HasWorkflow, WorkflowID: lp.WorkflowID,
			HasAfter: lp.HasAfter, After: lp.After, SkewUs: lp.SkewUs, HasBefore: lp.HasBefore, Before: lp.Before,
			MinusSkewUs: lp.MinusSkewUs, WithinUs: lp.WithinUs, WithinSkewUs: lp.WithinSkewUs, NotePattern: lp.NotePattern,
			PayloadPaths: lp.PayloadPaths, PayloadValues: lp.PayloadValues,
			AttachmentPaths: lp.AttachmentPaths, AttachmentValues: lp.AttachmentValues})
		return err
	})
	if err != nil {
		return res, err
	}
	for _, c := range counts {
		// The eligibility test reads a row's state and partition: a row of the group.
		r := &listRow{State: dbsqlc.VenturiJobState(c.State)}
		if c.Singleton {
			r.Part = pgtype.Text{String: SingletonSlotPrefix, Valid: true}
		}
		res.Matched += int(c.N)
		if a.eligible(r) {
			res.Eligible += int(c.N)
		}
	}
	if res.Matched >= countMax {
		res.CountStopped, res.More = true, true
	}
	if res.Eligible > limit {
		res.More, res.Eligible = true, limit
	}
	return res, nil
}

// bulkBatch applies a to one batch in its own transaction, with the action's audit entry
// (created by the first batch, counted by each), retrying the batch when it deadlocked
// with a worker's statement.
func (q *Queue) bulkBatch(ctx context.Context, a bulkAction, ids []pgtype.UUID, note, target, reason string, res *BulkResult) (int64, error) {
	var changed int64
	for attempt := 1; ; attempt++ {
		auditID := res.AuditID
		err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) (err error) {
			if changed, err = a.apply(ctx, q, tx, ids, note); err != nil {
				return err
			}
			if auditID == 0 {
				auditID, err = q.audit(ctx, tx, a.audit, target, changed, reason)
				return err
			}
			return q.q.AuditAddCount(ctx, tx, dbsqlc.AuditAddCountParams{ID: auditID, N: changed})
		})
		var pgErr *pgconn.PgError
		if err != nil && attempt < 3 && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
			continue // a deadlock with a finishing or extending worker: the batch rolled back, run it again
		}
		if err == nil {
			res.AuditID = auditID
		}
		return changed, err
	}
}
