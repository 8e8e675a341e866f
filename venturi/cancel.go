package venturi

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// ErrJobFinished is returned by [Queue.Cancel] for a job that already completed or died.
var ErrJobFinished = errors.New("venturi: job already finished")

// CancelResult says what a cancel did to one job.
type CancelResult int

// Cancel results.
const (
	// CancelEnded: the job was pending (scheduled or available) or waiting for a signal,
	// and is now cancelled.
	CancelEnded CancelResult = iota + 1
	// CancelRequested: the job was running; its run was asked to stop. It sees
	// [Run.Shutdown] at once (on any worker: by notification, or at its next lease
	// extension) and its context is cancelled after the worker's ShutdownGrace. Unless the
	// run completes meanwhile, the job ends cancelled, whatever the run reports, and its
	// late writes are fenced. [Queue.Job] shows the outcome.
	CancelRequested
	// CancelAlready: the job was cancelled before, or its run was already asked to stop.
	CancelAlready
)

// String returns the result's name.
func (r CancelResult) String() string {
	switch r {
	case CancelEnded:
		return "ended"
	case CancelRequested:
		return "requested"
	case CancelAlready:
		return "already"
	}
	return fmt.Sprintf("CancelResult(%d)", int(r))
}

// MaxCancelReasonBytes bounds a cancel's reason (longer ones are cut).
const MaxCancelReasonBytes = 1024

// Cancel cancels job id, journaling reason: a pending job ends in [StateCancelled] at
// once, a running one is asked to stop (see [CancelRequested]). Cancelling is idempotent
// ([CancelAlready]) and never retried; it returns [ErrJobFinished] for a completed or dead
// job and [ErrNotFound] for an unknown one. A cancelled job is not a failure.
func (q *Queue) Cancel(ctx context.Context, id ulid.ULID, reason string) (CancelResult, error) {
	var res CancelResult
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) (err error) {
		res, err = q.cancelTx(ctx, tx, id, cancelNote(reason))
		return err
	})
	return res, err
}

// CancelTx is [Queue.Cancel] inside the caller's transaction tx: the cancel commits or
// rolls back with it, so a producer can cancel a job together with its own writes (delete
// the import's row and cancel its job, say). It locks the job's row until tx ends, so the
// job's run cannot end meanwhile; keep tx short. A running job's workers are told to stop
// when tx commits (notifications are transactional). Under REPEATABLE READ or SERIALIZABLE
// a concurrent change of the job fails the call with a serialization error, as any update
// of a row does; READ COMMITTED (the default) waits for it instead.
func (q *Queue) CancelTx(ctx context.Context, tx pgx.Tx, id ulid.ULID, reason string) (CancelResult, error) {
	if tx == nil {
		return 0, errors.New("venturi: CancelTx needs a transaction")
	}
	return q.cancelTx(ctx, tx, id, cancelNote(reason))
}

// cancelTx cancels one job in tx: it locks the job, then cancels it in a statement whose
// snapshot sees it as locked.
func (q *Queue) cancelTx(ctx context.Context, tx pgx.Tx, id ulid.ULID, note string) (CancelResult, error) {
	job, err := q.q.LockJobForSignal(ctx, tx, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		// Not pending: finished (in the history, read in a snapshot newer than the lock
		// wait, which may have been for its move there), or not at all.
		st, herr := q.q.FinishedJobState(ctx, tx, uuidOf(id))
		switch {
		case errors.Is(herr, pgx.ErrNoRows):
			return 0, ErrNotFound
		case herr != nil:
			return 0, herr
		case st == dbsqlc.VenturiJobStateCancelled:
			return CancelAlready, nil
		}
		return 0, ErrJobFinished
	}
	if err != nil {
		return 0, err
	}
	row, err := q.q.CancelLocked(ctx, tx, dbsqlc.CancelLockedParams{Ids: []pgtype.UUID{uuidOf(id)}, Note: note})
	if err != nil {
		return 0, err
	}
	switch {
	case row.Ended > 0:
		return CancelEnded, nil
	case len(row.Asked) > 0:
		return CancelRequested, q.notifyStop(ctx, tx, id)
	case job.State == dbsqlc.VenturiJobStateRunning || job.State == dbsqlc.VenturiJobStateCancelled:
		return CancelAlready, nil
	}
	return 0, ErrJobFinished
}

// CancelByKey cancels every pending, waiting or running job of kind with the dedup key,
// as [Queue.Cancel] does, and returns what it did to each, by job ID. No job is not an
// error.
func (q *Queue) CancelByKey(ctx context.Context, kind string, key DedupKey, reason string) (map[ulid.ULID]CancelResult, error) {
	out := map[ulid.ULID]CancelResult{}
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		ids, err := q.q.JobsByKey(ctx, tx, dbsqlc.JobsByKeyParams{Kind: kind, DedupKey: string(key)})
		if err != nil {
			return err
		}
		for _, u := range ids { // in ID order: the lock order
			res, err := q.cancelTx(ctx, tx, ulidOf(u), cancelNote(reason))
			switch {
			case errors.Is(err, ErrJobFinished) || errors.Is(err, ErrNotFound):
				continue // it ended between the lookup and the lock
			case err != nil:
				return err
			}
			out[ulidOf(u)] = res
		}
		return nil
	})
	return out, err
}

// notifyStop tells the workers, when tx commits, that job id's run is asked to stop.
func (q *Queue) notifyStop(ctx context.Context, tx pgx.Tx, id ulid.ULID) error {
	if q.poll {
		return nil // the lease extension delivers it
	}
	return q.q.Notify(ctx, tx, dbsqlc.NotifyParams{Channel: q.channel,
		Payload: stopPrefix + string(EventCancelled) + ":" + uuidText(id)})
}

// cancelNote is a cancel's journal note.
func cancelNote(reason string) string {
	if reason == "" {
		reason = "cancelled"
	}
	if len(reason) > MaxCancelReasonBytes {
		reason = reason[:MaxCancelReasonBytes]
	}
	return cleanNote(reason)
}
