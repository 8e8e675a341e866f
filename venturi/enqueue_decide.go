package venturi

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/journalenc"
)

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

// mergedEntry is the journal entry an enqueue leaves in the pending job it merged into.
func mergedEntry(merge string, due DuePolicy, id ulid.ULID) string {
	return string(journalenc.Append(nil, &journalenc.Entry{Event: string(EventMerged), Merge: merge, Due: due.String(), Note: "merged enqueue " + id.String()}))
}

// candidate is a pending job found under a dedup key, as stored.
type candidate struct {
	id       ulid.ULID
	priority int16
	payload  []byte
	carry    []byte
	runs     int
	failures int
	journal  []byte
	moved    int64 // journal entries moved out of the row before journal's first
}

// merger calls a task type's Merge method through reflection. One is built per task type
// and cached; it is used only on a dedup collision.
type merger struct {
	method    reflect.Method // nil Func: no merge method, the default Replace applies
	ptrRecv   bool
	param     reflect.Type // Pending[T, C]
	carryType reflect.Type
}

func mergerFor(t reflect.Type) (*merger, error) {
	if v, ok := mergers.Load(t); ok {
		if err, isErr := v.(error); isErr {
			return nil, err
		}
		return v.(*merger), nil
	}
	m, err := buildMerger(t)
	if err != nil {
		mergers.Store(t, err)
		return nil, err
	}
	mergers.Store(t, m)
	return m, nil
}

func buildMerger(t reflect.Type) (*merger, error) {
	m := &merger{}
	method, ok := t.MethodByName("Merge")
	if !ok && t.Kind() != reflect.Pointer {
		method, ok = reflect.PointerTo(t).MethodByName("Merge")
		m.ptrRecv = ok
	}
	if !ok {
		return m, nil
	}
	ft := method.Type // receiver is the first input
	if ft.NumIn() != 2 || ft.NumOut() != 1 ||
		!reflect.PointerTo(ft.In(1)).Implements(pendingFillerType) ||
		!ft.Out(0).Implements(mergeResultType) {
		return nil, fmt.Errorf("venturi: %v has a Merge method that is not func(venturi.Pending[T, C]) venturi.Merge[T, C]", t)
	}
	carry, _ := ft.In(1).FieldByName("Carry")
	payload, _ := ft.In(1).FieldByName("Payload")
	if payload.Type != t && !(t.Kind() == reflect.Pointer && payload.Type == t.Elem()) {
		return nil, fmt.Errorf("venturi: %v.Merge takes Pending of %v, want Pending of %v", t, payload.Type, t)
	}
	m.method, m.param, m.carryType = method, ft.In(1), carry.Type
	return m, nil
}

// merge runs the task's merge method against a candidate, or returns Replace when the type
// has none.
func (m *merger) merge(task Task, c *candidate) (Action, Task, any, Due, error) {
	if !m.method.Func.IsValid() {
		return ActionReplaced, nil, nil, Due{}, nil
	}
	pending := reflect.New(m.param)
	if err := pending.Interface().(pendingFiller).fill(c); err != nil {
		return 0, nil, nil, Due{}, err
	}
	recv := reflect.ValueOf(task)
	if m.ptrRecv {
		p := reflect.New(recv.Type())
		p.Elem().Set(recv)
		recv = p
	}
	out := m.method.Func.Call([]reflect.Value{recv, pending.Elem()})
	decision, with, carry, due := out[0].Interface().(mergeResult).result()
	if decision < ActionKept || decision > ActionIndependent {
		return 0, nil, nil, Due{}, errors.New("venturi: merge returned no decision (use existing.Keep(), Replace(), With() or Independent())")
	}
	if err := due.validate(); err != nil {
		return 0, nil, nil, Due{}, err
	}
	return decision, with, carry, due, nil
}
