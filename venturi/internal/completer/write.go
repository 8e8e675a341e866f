package completer

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
)

// DB is a pool or a transaction: it runs statements and batches.
type DB interface {
	dbsqlc.DBTX
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// SendFunc sends, in one round trip, the statements queue adds to a batch, after
// SetLocalFinish with channel (their plans reach rows by index, and workflow members'
// ends settle as the pipeline's transaction commits, telling released kinds on channel).
type SendFunc func(ctx context.Context, channel string, queue func(*pgx.Batch)) error

// TxFunc runs fn in a transaction that the server ends if it stays idle between
// statements for too long, and whose plans reach rows by index (the worker's inHotTx).
type TxFunc func(ctx context.Context, fn func(pgx.Tx) error) error

// Writer writes the ends of runs: see [Writer.Write].
type Writer struct {
	// Worker is the worker's ID, recorded in every journal entry. Required.
	Worker string
	// Keep is how long the jobs whose runs end them stay in venturi_job_history.
	Keep Retention
	// Queries are the generated queries. Required.
	Queries *dbsqlc.Queries
	// Channel is the notification channel that wakes workers ("": none).
	Channel string
	// Send sends the statement of plain runs. Required.
	Send SendFunc
	// InTx runs the transaction of runs whose end takes more than FinishRuns. Required.
	InTx TxFunc
	// Logger receives the breakers that opened or closed. Required.
	Logger *slog.Logger
}

// Write writes the ends of runs, and returns the IDs of the jobs whose token still
// matched (the others lost their job; nothing of theirs was written). Plain runs take one
// FinishRuns statement (after SetLocalFinish, in the same round trip: see Send). When
// runs reported to breakers, waited or read signals, the same transaction also does what
// that entails (see [AfterFinish]): a breaker has counted a failure by the time its job
// can be claimed again. wakeGated says whether to wake the workers of the gated runs'
// kinds (a slot or a limit freed) in that transaction too; the completer spaces those
// wakes out. The transaction is idle-bounded (InTx): a worker cut off while it holds the
// runs' rows must not keep them from the rescue of another worker.
func (w *Writer) Write(ctx context.Context, ends []*jobrun.End, wakeGated bool) ([]pgtype.UUID, error) {
	var ids []pgtype.UUID
	if !slices.ContainsFunc(ends, func(r *jobrun.End) bool { return needsTx(r, wakeGated && w.Channel != "") }) {
		err := w.Send(ctx, w.Channel, func(b *pgx.Batch) { dbsqlc.QueueFinishRuns(b, Params(w.Worker, w.Keep, ends), &ids) })
		return ids, err
	}
	err := w.InTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		BeforeFinish(b, w.Channel, ends)
		dbsqlc.QueueFinishRuns(b, Params(w.Worker, w.Keep, ends), &ids)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return AfterFinish(ctx, tx, w.Queries, w.Channel, ends, ids, wakeGated, w.Logger)
	})
	return ids, err
}

// BeforeFinish queues what goes before the FinishRuns of ends in their transaction: the
// setting that has workflow members' ends settle their workflows as the transaction
// commits (SetLocalFinishChannel), and the hold of the workflows that ends attach nodes to
// (jobrun.Flow), so that no settle elsewhere sees a spawner's end without its children.
func BeforeFinish(b *pgx.Batch, channel string, ends []*jobrun.End) {
	dbsqlc.QueueSetLocalFinishChannel(b, channel)
	if wf := attaching(ends); len(wf) > 0 {
		dbsqlc.QueueShareWorkflows(b, wf)
	}
}

// needsTx reports whether writing r's end takes more than FinishRuns (see AfterFinish);
// wake says whether the workers of a gated run's kind are to be woken.
func needsTx(r *jobrun.End, wake bool) bool {
	return r.Job.Breaker != "" || len(r.Wait) > 0 || len(r.Consumed) > 0 || (wake && r.Job.Gated) || r.Flow != nil
}

// attaching returns the workflows that ends attach nodes to (jobrun.Flow), to hold
// before their finish.
func attaching(ends []*jobrun.End) []pgtype.UUID {
	var ids []pgtype.UUID
	for _, r := range ends {
		if r.Flow != nil && r.Flow.Attach != nil && !slices.Contains(ids, r.Flow.Workflow) {
			ids = append(ids, r.Flow.Workflow)
		}
	}
	return ids
}

// AfterFinish does what the end of runs entails beyond FinishRuns, in the transaction that
// wrote their results (ids: what FinishRuns returned): it stores the outputs of workflow
// members' completions and the nodes they spawned (jobrun.Flow), marks the signals they
// read as consumed, sets what waiting jobs wait for (waking those whose signal already came),
// reports gated runs' outcomes to their breakers (in key order, the lock order) and wakes
// the workers of the kinds for which a slot, a limit or a signal may have made a job
// runnable (on channel; "": none).
func AfterFinish(ctx context.Context, db pgx.Tx, q *dbsqlc.Queries, channel string, ends []*jobrun.End, ids []pgtype.UUID, wakeGated bool, log *slog.Logger) error {
	var written map[ulid.ULID]bool
	var kinds []string // to wake
	var p dbsqlc.BreakerRecordParams
	var waits dbsqlc.ArmWaitsParams
	var used dbsqlc.ConsumeSignalsParams
	var outputs dbsqlc.WriteOutputsParams
	var attach []func(context.Context, pgx.Tx) error
	for _, r := range ends {
		if !needsTx(r, wakeGated) {
			continue
		}
		if written == nil {
			written = make(map[ulid.ULID]bool, len(ids))
			for _, u := range ids {
				written[ulid.ULID(u.Bytes)] = true
			}
		}
		if !written[r.Job.ID] {
			continue
		}
		if f := r.Flow; f != nil {
			if f.Output != nil {
				outputs.JobIds = append(outputs.JobIds, uuidOf(r.Job.ID))
				outputs.Outputs = append(outputs.Outputs, string(f.Output))
				outputs.Tokens = append(outputs.Tokens, r.Job.Token)
			}
			if f.Attach != nil {
				attach = append(attach, f.Attach)
			}
		}
		for _, seq := range r.Consumed {
			used.Ids, used.Tokens, used.Seqs = append(used.Ids, uuidOf(r.Job.ID)), append(used.Tokens, r.Job.Token), append(used.Seqs, seq)
		}
		if len(r.Wait) > 0 {
			waits.Ids, waits.Names = append(waits.Ids, uuidOf(r.Job.ID)), append(waits.Names, strings.Join(r.Wait, "\x1f"))
		}
		if !r.Job.Gated {
			continue
		}
		if wakeGated && !slices.Contains(kinds, r.Job.Kind) {
			kinds = append(kinds, r.Job.Kind)
		}
		if failed, ok := breakerOutcome(r); ok {
			p.Keys = append(p.Keys, r.Job.Breaker)
			p.Failed = append(p.Failed, failed)
		}
	}
	if len(outputs.JobIds) > 0 {
		if err := q.WriteOutputs(ctx, db, outputs); err != nil {
			return err
		}
	}
	for _, a := range attach {
		if err := a(ctx, db); err != nil {
			return err
		}
	}
	if len(used.Ids) > 0 {
		if err := q.ConsumeSignals(ctx, db, used); err != nil {
			return err
		}
	}
	if len(waits.Ids) > 0 {
		armed, err := q.ArmWaits(ctx, db, waits)
		if err != nil {
			return err
		}
		for _, a := range armed {
			if a.Ready && !slices.Contains(kinds, a.Kind) {
				kinds = append(kinds, a.Kind) // a signal came before the wait: run it now
			}
		}
	}
	if len(p.Keys) > 0 {
		if err := RecordBreakers(ctx, db, q, p, log); err != nil {
			return err
		}
	}
	return notifyKinds(ctx, db, channel, kinds)
}

// notifyKinds wakes the workers of kinds (in db's transaction, if it is one: then on
// commit).
func notifyKinds(ctx context.Context, db DB, channel string, kinds []string) error {
	if channel == "" || len(kinds) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, k := range kinds {
		dbsqlc.QueueNotify(b, dbsqlc.NotifyParams{Channel: channel, Payload: k})
	}
	return db.SendBatch(ctx, b).Close()
}

// RecordBreakers reports outcomes to breakers, sorted by key (stable: one key's outcomes
// keep their order), and logs the breakers that opened or closed.
func RecordBreakers(ctx context.Context, db dbsqlc.DBTX, q *dbsqlc.Queries, p dbsqlc.BreakerRecordParams, log *slog.Logger) error {
	idx := make([]int, len(p.Keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(p.Keys[a], p.Keys[b]) })
	var sorted dbsqlc.BreakerRecordParams
	for _, i := range idx {
		sorted.Keys = append(sorted.Keys, p.Keys[i])
		sorted.Failed = append(sorted.Failed, p.Failed[i])
	}
	rows, err := q.BreakerRecord(ctx, db, sorted)
	if err != nil {
		return fmt.Errorf("venturi: report outcomes to breakers: %w", err)
	}
	for _, r := range rows {
		if r.Opened {
			log.Warn("venturi: circuit opened: claims of the kind stop until the cooldown ends, then one probe runs",
				"kind", r.Kind, "partition", r.Part, "failures", r.Fails, "open_until", r.OpenUntil)
		} else {
			log.Info("venturi: circuit closed: a run succeeded", "kind", r.Kind, "partition", r.Part)
		}
	}
	return nil
}

// breakerOutcome reports whether the run failed, for its breaker; ok is false for an
// outcome that is neither a success nor a failure (pause, interruption, replacement).
func breakerOutcome(r *jobrun.End) (failed, ok bool) {
	switch {
	case r.Job.Breaker == "":
		return false, false
	case r.Failed:
		return true, true
	case r.State == dbsqlc.VenturiJobStateCompleted:
		return false, true
	}
	return false, false
}
