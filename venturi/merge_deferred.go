package venturi

// Enqueues from SQL (venturi_enqueue, migration *_venturi_sql_api) decide a dedup
// collision in the database when the kind's merge is a rule: Replace (a type without a
// merge method) or a MergeRule. A Merge method is Go code that reads the pending job's payload and carry: an
// enqueue from SQL that collides with a pending job of such a kind (or of a kind no worker
// of this version registered) is stored in venturi_deferred_merge instead, and applied
// here, in order, by a Go process that knows the type: a worker that registered the kind
// (woken on venturi_merge_channel(), and every MaintenanceInterval), or a Go enqueue of
// the same key, which applies the key's deferred enqueues before its own (enqueueTx).
// Each is applied as a Go enqueue of the same task would be at that moment, under the
// key's lock, in the transaction that deletes it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// applyDeferred applies the enqueues from SQL of (kind, key) that wait for a Go merge,
// oldest first, as Go enqueues of a task of type typ, in tx, which holds the key's lock.
// The enqueue from SQL was told it was accepted, so none is dropped: one whose merge fails
// in Go (the Merge method panics, or returns what cannot be stored) is enqueued beside the
// pending job, as Independent would be; one whose payload does not decode into typ (it
// could neither merge nor run) is written as a job that ended dead, with the decode error
// as its note, as its first run would have ended. Both are logged.
func (q *Queue) applyDeferred(ctx context.Context, tx pgx.Tx, kind, key string, typ reflect.Type, log *slog.Logger) error {
	rows, err := q.q.TakeDeferredMerges(ctx, tx, dbsqlc.TakeDeferredMergesParams{Kind: kind, DedupKey: key})
	if err != nil {
		return err
	}
	for _, r := range rows {
		p := deferredPlan(r)
		task, err := decodeTask(typ, r.Payload)
		if err != nil {
			log.Warn("venturi: an enqueue from SQL does not decode into its kind's type; it ends dead",
				"kind", kind, "dedup_key", key, "job_id", p.id, "err", err)
			if err := q.q.InsertDeadJob(ctx, tx, dbsqlc.InsertDeadJobParams{ID: r.ID, Kind: kind, Queue: r.Queue,
				Priority: r.Priority, DedupKey: key, Payload: string(r.Payload), Events: r.Events, Meta: r.Meta,
				Note: cleanNote(err.Error())}); err != nil {
				return err
			}
			continue
		}
		p.task = task
		err = q.mergeDeferred(ctx, tx, p)
		if me := (*mergeError)(nil); err == nil || !errors.As(err, &me) {
			if err != nil {
				return err // the database refused: tx is aborted, and the entry stays
			}
			continue
		}
		log.Warn("venturi: an enqueue from SQL could not be merged; it is enqueued beside the pending job",
			"kind", kind, "dedup_key", key, "job_id", p.id, "err", err)
		if _, err := q.insert(ctx, tx, p, ActionIndependent); err != nil {
			return err
		}
	}
	return nil
}

// mergeDeferred is enqueueTx for a deferred enqueue; a panic of the task's Merge method is
// a failed merge.
func (q *Queue) mergeDeferred(ctx context.Context, tx pgx.Tx, p *plan) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &mergeError{fmt.Errorf("venturi: merge %s panicked: %v", p.kind, r)}
		}
	}()
	_, err = q.enqueueTx(ctx, tx, p)
	return err
}

// deferredPlan is the plan of a deferred enqueue, as the SQL call named it: its ID (its
// job's, if it is inserted), queue (as OnQueue names one), priority, due time, partition,
// slot, events and metadata. The caller sets its task.
func deferredPlan(r *dbsqlc.TakeDeferredMergesRow) *plan {
	p := &plan{id: ulidOf(r.ID), kind: r.Kind, queue: r.Queue, key: r.DedupKey, priority: Priority(r.Priority),
		payload: r.Payload, part: r.Part, events: r.Events, meta: r.Meta}
	p.opts.queue = r.Queue
	p.opts.at = r.RunAt
	if r.SlotKey.Valid {
		p.slot = Slot{Key: r.SlotKey.String, Limit: int(r.SlotLimit.Int32), Policy: SlotPolicy(r.SlotPolicy.Int16)}
	}
	return p
}

// decodeTask decodes a payload into a task of type typ.
func decodeTask(typ reflect.Type, payload []byte) (Task, error) {
	if typ == nil {
		return nil, errors.New("venturi: no task type to decode the payload into")
	}
	v := reflect.New(typ)
	if err := json.Unmarshal(payload, v.Interface()); err != nil {
		return nil, fmt.Errorf("decode payload into %s: %w", typ, err)
	}
	if typ.Kind() == reflect.Pointer && v.Elem().IsNil() {
		return nil, fmt.Errorf("decode payload into %s: null", typ)
	}
	t, ok := v.Elem().Interface().(Task)
	if !ok {
		return nil, fmt.Errorf("venturi: %s is not a Task", typ)
	}
	return t, nil
}

// deferredMerges is the worker's service that applies the deferred enqueues of its kinds:
// at start, when woken (a notification on venturi_merge_channel()), and every interval.
type deferredMerges struct {
	q        *Queue // on the worker's control pool
	db       *pgxpool.Pool
	kinds    []string
	types    map[string]reflect.Type
	interval time.Duration
	idle     time.Duration // the idle bound of each transaction
	log      *slog.Logger
	wake     chan struct{}
}

// deferredMergeBatch is the most keys one look for deferred enqueues returns.
const deferredMergeBatch = 100

// Wake asks for a pass.
func (m *deferredMerges) Wake() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run passes until ctx ends.
func (m *deferredMerges) Run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		if _, err := m.pass(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("venturi: apply the enqueues from SQL that wait for a Go merge", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-t.C:
		}
	}
}

// pass applies the deferred enqueues of the worker's kinds, a key per transaction, until
// none is left (at most 100 looks, then the next wake or tick goes on). It returns how
// many keys it applied.
func (m *deferredMerges) pass(ctx context.Context) (int, error) {
	n := 0
	for range 100 {
		keys, err := m.q.q.DeferredMergeKeys(ctx, m.db, dbsqlc.DeferredMergeKeysParams{Kinds: m.kinds, Max: deferredMergeBatch})
		if err != nil {
			return n, err
		}
		for _, k := range keys {
			err := inTx(ctx, m.db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, m.idle, func(tx pgx.Tx) error {
				if _, err := m.q.q.DedupLock(ctx, tx, dbsqlc.DedupLockParams{Kind: k.Kind, DedupKey: k.DedupKey}); err != nil {
					return err
				}
				return m.q.applyDeferred(ctx, tx, k.Kind, k.DedupKey, m.types[k.Kind], m.log)
			})
			if err != nil {
				return n, fmt.Errorf("kind %q, dedup key %q: %w", k.Kind, k.DedupKey, err)
			}
			n++
		}
		if len(keys) < deferredMergeBatch {
			return n, nil
		}
	}
	return n, nil
}
