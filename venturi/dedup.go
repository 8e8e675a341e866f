package venturi

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// batcher is a pool or a transaction.
type batcher interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// lockAndInsert takes the key's lock and inserts the task unless a pending job has the
// key, in one round trip; a NOTIFY for due work rides the same batch and is delivered at
// commit. It reports the transaction's isolation level (nothing is inserted unless it is
// READ COMMITTED) and whether the task was inserted.
func (q *Queue) lockAndInsert(ctx context.Context, db batcher, p *plan) (iso string, inserted bool, err error) {
	b := &pgx.Batch{}
	var row dbsqlc.InsertIfNoCandidateRow
	dbsqlc.QueueDedupLock(b, dbsqlc.DedupLockParams{Kind: p.kind, DedupKey: p.key}, &iso)
	sk, sl, sp := p.slotParams()
	dbsqlc.QueueInsertIfNoCandidate(b, dbsqlc.InsertIfNoCandidateParams{
		Part: p.part, SlotKey: sk, SlotLimit: sl, SlotPolicy: sp,
		Kind: p.kind, DedupKey: p.key, ID: uuidOf(p.id), Queue: p.queue, Priority: int16(p.priority),
		Payload: string(p.payload), At: p.opts.at, DelayUs: delayOf(p.opts.delay),
		Events: p.events, Meta: p.meta,
	}, &row)
	q.queueNotify(b, p)
	err = db.SendBatch(ctx, b).Close()
	return iso, row.Inserted, err
}

// replaceFast enqueues a dedup task whose type has no merge method, so a collision is
// always Replace: lock the key and replace-or-insert in one round trip. ok is false when
// the type has a merge method, or when db's transaction is not READ COMMITTED (the caller
// then takes the general path, which reports ErrIsolation where it applies).
func (q *Queue) replaceFast(ctx context.Context, db batcher, p *plan) (Result, bool, error) {
	if m, err := mergerFor(reflect.TypeOf(p.task)); err != nil || m.method.Func.IsValid() {
		return Result{}, false, nil // the general path reports a malformed merge on collision
	}
	entry := mergedEntry(ActionReplaced.mergeName(), DueEarliest, p.id)
	var (
		iso string
		row dbsqlc.InsertOrReplaceRow
	)
	b := &pgx.Batch{}
	dbsqlc.QueueDedupLock(b, dbsqlc.DedupLockParams{Kind: p.kind, DedupKey: p.key}, &iso)
	sk, sl, sp := p.slotParams()
	dbsqlc.QueueInsertOrReplace(b, dbsqlc.InsertOrReplaceParams{
		Part: p.part, SlotKey: sk, SlotLimit: sl, SlotPolicy: sp,
		At: p.opts.at, DelayUs: delayOf(p.opts.delay), Kind: p.kind, DedupKey: p.key,
		Payload: string(p.payload), Priority: int16(p.priority), Entry: entry, ID: uuidOf(p.id), Queue: p.queue,
		Events: p.events, Meta: p.meta,
	}, &row)
	q.queueNotify(b, p)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, false, err
	}
	if !row.JobID.Valid {
		return Result{}, false, nil
	}
	if row.Replaced {
		return Result{ID: ulidOf(row.JobID), Action: ActionReplaced}, true, nil
	}
	return Result{ID: p.id, Action: ActionInserted}, true, nil
}

// enqueueTx is the dedup path inside a transaction that holds (or takes) the key's lock.
func (q *Queue) enqueueTx(ctx context.Context, tx pgx.Tx, p *plan) (Result, error) {
	if res, ok, err := q.replaceFast(ctx, tx, p); ok || err != nil {
		return res, err
	}
	iso, inserted, err := q.lockAndInsert(ctx, tx, p)
	if err != nil {
		return Result{}, err
	}
	if iso != "read committed" {
		return Result{}, fmt.Errorf("%w (the transaction is %s)", ErrIsolation, iso)
	}
	if inserted {
		return Result{ID: p.id, Action: ActionInserted}, nil
	}
	row, err := q.q.DedupCandidate(ctx, tx, dbsqlc.DedupCandidateParams{Kind: p.kind, DedupKey: p.key})
	if errors.Is(err, pgx.ErrNoRows) {
		// The candidate was claimed between the two statements: nothing to merge into.
		return q.insert(ctx, tx, p, ActionInserted)
	}
	if err != nil {
		return Result{}, err
	}
	c := &candidate{id: ulidOf(row.ID), priority: row.Priority, payload: row.Payload, carry: row.Carry,
		runs: int(row.Runs), failures: int(row.Failures), journal: row.Journal, moved: row.JournalMoved}
	m, err := mergerFor(reflect.TypeOf(p.task))
	if err != nil {
		return Result{}, err
	}
	decision, with, carry, due, err := m.merge(p.task, c)
	if err != nil {
		return Result{}, fmt.Errorf("venturi: merge %s into job %s: %w", p.kind, c.id, err)
	}
	args := dbsqlc.MergeIntoParams{ID: row.ID, At: p.opts.at, DelayUs: delayOf(p.opts.delay),
		DuePolicy: int16(due.Policy), DebounceUs: delayOf(due.Delay), MaxWaitUs: delayOf(due.MaxWait), Events: p.events}
	action := decision
	switch decision {
	case ActionIndependent:
		return q.insert(ctx, tx, p, ActionIndependent)
	case ActionKept:
	case ActionReplaced:
		args.Replace, args.SetCarry = true, true
		args.Payload, args.Priority = string(p.payload), int16(p.priority)
		args.Queue, args.Part = p.queue, p.part
		args.SlotKey, args.SlotLimit, args.SlotPolicy = p.slotParams()
	case ActionMerged:
		wp, err := prepare(with, nil)
		if err != nil {
			return Result{}, fmt.Errorf("venturi: merge result: %w", err)
		}
		if wp.kind != p.kind || wp.key != p.key {
			return Result{}, fmt.Errorf("venturi: merge of %s/%s returned a task with kind %q and key %q; With must keep both", p.kind, p.key, wp.kind, wp.key)
		}
		cb, err := encodeCarry(carry)
		if err != nil {
			return Result{}, fmt.Errorf("venturi: merge: %w", err)
		}
		if p.opts.queue != "" { // OnQueue applies to the merged task too
			wp.queue = p.opts.queue
		}
		args.Replace, args.SetCarry = true, true
		args.Payload, args.Priority, args.Carry = string(wp.payload), int16(wp.priority), string(cb)
		args.Queue, args.Part = wp.queue, wp.part
		args.SlotKey, args.SlotLimit, args.SlotPolicy = wp.slotParams()
	}
	args.Entry = mergedEntry(decision.mergeName(), due.Policy, p.id)
	merged, err := q.q.MergeInto(ctx, tx, args)
	if err != nil {
		return Result{}, err
	}
	if action != ActionKept || due.Policy != DueKeep { // due now, or its due time moved: see queueNotify
		if err := q.notifyNow(ctx, tx, p.kind, merged.Due); err != nil {
			return Result{}, err
		}
	}
	return Result{ID: c.id, Action: action}, nil
}

// insert inserts p as a new job (with its NOTIFY) and reports action.
func (q *Queue) insert(ctx context.Context, db batcher, p *plan, action Action) (Result, error) {
	b := &pgx.Batch{}
	q.queueInsert(b, p)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, err
	}
	return Result{ID: p.id, Action: action}, nil
}
