package venturi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	iso, inserted, deferred, err := q.lockAndInsert(ctx, tx, p)
	if err != nil {
		return Result{}, err
	}
	if iso != "read committed" {
		return Result{}, fmt.Errorf("%w (the transaction is %s)", ErrIsolation, iso)
	}
	if inserted {
		return Result{ID: p.id, Action: ActionInserted}, nil
	}
	if deferred {
		// Enqueues from SQL of this key wait for a Go merge: they came first, so they are
		// applied first, with this task's type (see merge_deferred.go).
		if err := q.applyDeferred(ctx, tx, p.kind, p.key, reflect.TypeOf(p.task), slog.Default()); err != nil {
			return Result{}, err
		}
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
		return Result{}, &mergeError{err}
	}
	decision, with, carry, due, err := m.merge(p.task, c)
	if err != nil {
		return Result{}, &mergeError{fmt.Errorf("venturi: merge %s into job %s: %w", p.kind, c.id, err)}
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
			return Result{}, &mergeError{fmt.Errorf("venturi: merge result: %w", err)}
		}
		if wp.kind != p.kind || wp.key != p.key {
			return Result{}, &mergeError{fmt.Errorf("venturi: merge of %s/%s returned a task with kind %q and key %q; With must keep both", p.kind, p.key, wp.kind, wp.key)}
		}
		cb, err := encodeCarry(carry)
		if err != nil {
			return Result{}, &mergeError{fmt.Errorf("venturi: merge: %w", err)}
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

// mergeError is an enqueue's merge that failed in Go (a malformed merge method, a merge
// result that cannot be stored): the transaction is intact. It reads as the error it wraps.
type mergeError struct{ err error }

func (e *mergeError) Error() string { return e.err.Error() }
func (e *mergeError) Unwrap() error { return e.err }

// replaceFast enqueues a dedup task whose type has no merge method (nor a rule other than
// the default), so a collision is always Replace: lock the key and replace-or-insert in
// one round trip. ok is false when the type has a merge method or another rule, when db's
// transaction is not READ COMMITTED (the caller then takes the general path, which
// reports ErrIsolation where it applies), or when enqueues from SQL of the key wait for a
// Go merge (the general path applies them first).
func (q *Queue) replaceFast(ctx context.Context, db batcher, p *plan) (Result, bool, error) {
	if m, err := mergerFor(reflect.TypeOf(p.task)); err != nil || !m.alwaysReplaces() {
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
// READ COMMITTED), whether the task was inserted, and whether enqueues from SQL of the key
// wait for a Go merge (then nothing is inserted either).
func (q *Queue) lockAndInsert(ctx context.Context, db batcher, p *plan) (iso string, inserted, deferred bool, err error) {
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
	return iso, row.Inserted, row.Deferred, err
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

// merger calls a task type's Merge method through reflection, or applies its MergeRule.
// One is built per task type and cached; it is used only on a dedup collision.
type merger struct {
	method    reflect.Method // nil Func: no merge method, the rule (or the default Replace) applies
	ptrRecv   bool
	param     reflect.Type // Pending[T, C]
	carryType reflect.Type
	rule      *MergeRule // the type's MergeRule (RuleMerger); nil: none
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
	rule, hasRule, err := ruleOf(t)
	if err != nil {
		return nil, err
	}
	if hasRule {
		m.rule = &rule
	}
	method, ok := t.MethodByName("Merge")
	if !ok && t.Kind() != reflect.Pointer {
		method, ok = reflect.PointerTo(t).MethodByName("Merge")
		m.ptrRecv = ok
	}
	if !ok {
		return m, nil
	}
	if hasRule {
		return nil, fmt.Errorf("venturi: %v has both a Merge and a MergeRule method; declare one", t)
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

// ruleOf calls t's MergeRule method, if it has one, on the zero value.
func ruleOf(t reflect.Type) (MergeRule, bool, error) {
	var v reflect.Value
	switch {
	case t.Kind() == reflect.Pointer && t.Implements(ruleMergerType):
		v = reflect.New(t.Elem()) // a nil pointer's method could panic
	case t.Implements(ruleMergerType):
		v = reflect.New(t).Elem()
	case reflect.PointerTo(t).Implements(ruleMergerType):
		v = reflect.New(t)
	default:
		return MergeRule{}, false, nil
	}
	r := v.Interface().(RuleMerger).MergeRule()
	if r.decision != ActionKept && r.decision != ActionReplaced {
		return MergeRule{}, false, fmt.Errorf("venturi: %v.MergeRule returned no rule (use venturi.KeepPending() or venturi.ReplacePending())", t)
	}
	if err := r.Due().validate(); err != nil {
		return MergeRule{}, false, fmt.Errorf("venturi: %v.MergeRule: %w", t, err)
	}
	return r, true, nil
}

// alwaysReplaces reports whether every collision of the type is a Replace with the default
// due time (no Merge method, no rule or that rule): replaceFast's one-statement case.
func (m *merger) alwaysReplaces() bool {
	return !m.method.Func.IsValid() &&
		(m.rule == nil || (m.rule.decision == ActionReplaced && m.rule.Due() == Due{Policy: DueEarliest}))
}

// sqlMerge is what a collision of an enqueue from SQL may decide for the type, as the
// workers that register it record it (venturi_kind.merge): "go" for a Merge method (it
// waits for a Go process), else the rule's decision ("keep" or "replace"; "replace"
// without a rule) and its due-time rule.
func (m *merger) sqlMerge() (string, Due) {
	switch {
	case m.method.Func.IsValid():
		return "go", Due{}
	case m.rule != nil && m.rule.decision == ActionKept:
		return "keep", m.rule.Due()
	case m.rule != nil:
		return "replace", m.rule.Due()
	}
	return "replace", Due{Policy: DueEarliest}
}

// merge runs the task's merge method against a candidate, or returns its rule's decision,
// or Replace when the type has neither.
func (m *merger) merge(task Task, c *candidate) (Action, Task, any, Due, error) {
	if m.rule != nil {
		return m.rule.decision, nil, nil, m.rule.Due(), nil
	}
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
