package venturi

// An enqueue reads in one direction, a file per stage: enqueue.go holds the entry points
// (Enqueue, EnqueueTx, EnqueueMany, EnqueueManyTx) and the enqueue middleware around them;
// enqueue_prepare.go validates and encodes a task into a plan; enqueue_decide.go decides,
// for a task with a dedup key, between inserting and merging into the pending job that
// has the key (the kind's Merge method); enqueue_write.go writes a new job; and
// enqueue_notify.go wakes the workers (NOTIFY, delivered at commit) and publishes the
// committed enqueue to the Queue's subscribers.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// MaxPayloadBytes is the largest encoded payload (and carry) an enqueue accepts: 1 MiB.
const MaxPayloadBytes = 1 << 20

// EnqueueOption adjusts one enqueue; [At], [After], [OnQueue], [WithMeta] and
// [WithEvents] make one.
type EnqueueOption interface {
	applyEnqueue(*enqueueOpts)
}

type enqueueOpts struct {
	at     *time.Time
	delay  time.Duration
	queue  string
	meta   Meta      // WithMeta, enqueue middleware
	events bool      // WithEvents
	id     ulid.ULID // withID: a batch member's, named after its job before it is prepared
}

// withID gives the job id instead of a new one (a batch member's node is named after it).
func withID(id ulid.ULID) EnqueueOption {
	return enqueueOptionFunc(func(o *enqueueOpts) { o.id = id })
}

type enqueueOptionFunc func(*enqueueOpts)

func (f enqueueOptionFunc) applyEnqueue(o *enqueueOpts) { f(o) }

// At makes the job due at t instead of now.
func At(t time.Time) EnqueueOption { return enqueueOptionFunc(func(o *enqueueOpts) { o.at = &t }) }

// After makes the job due d after the enqueue runs, measured by the database clock.
func After(d time.Duration) EnqueueOption {
	return enqueueOptionFunc(func(o *enqueueOpts) { o.delay = d })
}

// OnQueue puts the job in the named queue, overriding the task's [Queuer] and
// [DefaultQueue].
func OnQueue(name string) EnqueueOption {
	return enqueueOptionFunc(func(o *enqueueOpts) { o.queue = name })
}

// Enqueue enqueues task in its own transaction.
func (q *Queue) Enqueue(ctx context.Context, task Task, opts ...EnqueueOption) (Result, error) {
	used := opts // with the metadata enqueue middleware added: what the job got
	res, err := q.enqueueWith(ctx, task, opts, false, func(ctx context.Context, opts []EnqueueOption) (Result, error) {
		used = opts
		return q.enqueue(ctx, task, opts)
	})
	if err == nil {
		q.published(task, res, used)
	}
	return res, err
}

func (q *Queue) enqueue(ctx context.Context, task Task, opts []EnqueueOption) (Result, error) {
	p, err := q.prepare(task, opts)
	if err != nil {
		return Result{}, err
	}
	if p.key == "" {
		return q.insert(ctx, q.pool, p, ActionInserted)
	}
	if res, ok, err := q.replaceFast(ctx, q.pool, p); ok || err != nil {
		return res, err
	}
	// The common dedup case, in one round trip: lock the key, insert unless a pending job
	// has it. The batch is one implicit transaction, so the lock covers the insert.
	if _, inserted, _, err := q.lockAndInsert(ctx, q.pool, p); err != nil || inserted {
		return Result{ID: p.id, Action: ActionInserted}, err
	}
	// A collision (or a server whose default isolation is not READ COMMITTED, or enqueues
	// from SQL of the key that wait for a Go merge): merge under the key's lock in an
	// explicit READ COMMITTED transaction.
	var res Result
	err = pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		res, err = q.enqueueTx(ctx, tx, p)
		return err
	})
	return res, err
}

// EnqueueTx enqueues task inside tx: the job commits or rolls back with the caller's
// transaction, and workers cannot see it before the commit. An enqueue with a dedup key
// holds the key's lock until tx ends, so concurrent enqueues of the key wait for it; it
// requires READ COMMITTED (the default) and returns [ErrIsolation] otherwise.
func (q *Queue) EnqueueTx(ctx context.Context, tx pgx.Tx, task Task, opts ...EnqueueOption) (Result, error) {
	return q.enqueueWith(ctx, task, opts, true, func(ctx context.Context, opts []EnqueueOption) (Result, error) {
		p, err := q.prepare(task, opts)
		if err != nil {
			return Result{}, err
		}
		if p.key == "" {
			return q.insert(ctx, tx, p, ActionInserted)
		}
		return q.enqueueTx(ctx, tx, p)
	})
}

// EnqueueMany enqueues tasks in one transaction and returns one result per task, in
// order. Tasks without a dedup key are inserted with a single statement.
func (q *Queue) EnqueueMany(ctx context.Context, tasks []Task, opts ...EnqueueOption) ([]Result, error) {
	var res []Result
	used := make([][]EnqueueOption, len(tasks)) // each task's options as middleware left them
	err := pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		res, err = q.enqueueMany(ctx, tx, tasks, opts, false, used)
		return err
	})
	if err == nil {
		for i, r := range res {
			q.published(tasks[i], r, used[i])
		}
	}
	return res, err
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction. If any task is refused,
// none is enqueued: the batch runs under a savepoint when it has dedup keys (whose merge
// can refuse a task after others were written).
func (q *Queue) EnqueueManyTx(ctx context.Context, tx pgx.Tx, tasks []Task, opts ...EnqueueOption) ([]Result, error) {
	keyed := false
	for _, t := range tasks {
		if d, ok := t.(Deduplicator); ok && d.DedupKey() != "" {
			keyed = true
			break
		}
	}
	if !keyed {
		return q.enqueueMany(ctx, tx, tasks, opts, true, nil)
	}
	var res []Result
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { // a savepoint
		var err error
		res, err = q.enqueueMany(ctx, sp, tasks, opts, true, nil)
		return err
	})
	return res, err
}

// enqueueMany writes tasks in tx. When used is not nil, used[i] gets the options task i
// was prepared with (the metadata its enqueue middleware added included).
func (q *Queue) enqueueMany(ctx context.Context, tx pgx.Tx, tasks []Task, opts []EnqueueOption, inTx bool, used [][]EnqueueOption) ([]Result, error) {
	res := make([]Result, len(tasks))
	plain := dbsqlc.InsertJobsParams{}
	var keyed []int
	var plans []*plan
	notify := map[string]bool{} // NOTIFY payloads: one per kind and due-now-or-later
	for i, t := range tasks {
		p, err := q.prepareWith(ctx, t, opts, inTx, func(opts []EnqueueOption) {
			if used != nil {
				used[i] = opts
			}
		})
		if err != nil {
			return nil, fmt.Errorf("task %d: %w", i, err)
		}
		plans = append(plans, p)
		if p.key != "" {
			keyed = append(keyed, i)
			continue
		}
		res[i] = Result{ID: p.id, Action: ActionInserted}
		appendJob(&plain, p, p.opts.delay)
		notify[notifyPayload(p.kind, p.dueNow())] = true
	}
	if len(plain.Ids) > 0 {
		b := &pgx.Batch{}
		dbsqlc.QueueInsertJobs(b, plain)
		if !q.poll {
			for payload := range notify {
				dbsqlc.QueueNotify(b, dbsqlc.NotifyParams{Channel: q.channel, Payload: payload})
			}
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
	}
	// The keys' locks are taken in one order (kind, then key, bytewise: venturi_enqueue_many's
	// order too), so that batches naming the same keys in different orders queue behind each
	// other instead of deadlocking; tasks of one key keep their order.
	slices.SortStableFunc(keyed, func(a, b int) int {
		return cmp.Or(strings.Compare(plans[a].kind, plans[b].kind), strings.Compare(plans[a].key, plans[b].key))
	})
	for _, i := range keyed {
		r, err := q.enqueueTx(ctx, tx, plans[i])
		if err != nil {
			return nil, fmt.Errorf("task %d: %w", i, err)
		}
		res[i] = r
	}
	return res, nil
}

// appendJob adds p to the arrays of InsertJobs, due delay after its At (or now).
func appendJob(a *dbsqlc.InsertJobsParams, p *plan, delay time.Duration) {
	var at time.Time
	if p.opts.at != nil {
		at = *p.opts.at
	}
	a.Ids = append(a.Ids, uuidOf(p.id))
	a.Kinds = append(a.Kinds, p.kind)
	a.Queues = append(a.Queues, p.queue)
	a.Priorities = append(a.Priorities, int16(p.priority))
	a.Payloads = append(a.Payloads, string(p.payload))
	a.HasAt = append(a.HasAt, p.opts.at != nil)
	a.Ats = append(a.Ats, at)
	a.DelaysUs = append(a.DelaysUs, delayOf(delay))
	a.HasPart = append(a.HasPart, p.part.Valid)
	a.Parts = append(a.Parts, p.part.String)
	a.SlotKeys = append(a.SlotKeys, p.slot.Key)
	a.SlotLimits = append(a.SlotLimits, int32(p.slot.Limit))
	a.SlotPolicies = append(a.SlotPolicies, int16(p.slot.Policy))
	a.Events = append(a.Events, p.events)
	a.Metas = append(a.Metas, string(p.meta))
}

// prepareWith prepares task with opts inside the queue's enqueue middleware (each task of
// a many-job enqueue counts as inserted when it is prepared); seen, if not nil, gets the
// options it was prepared with (the middleware's metadata included).
func (q *Queue) prepareWith(ctx context.Context, task Task, opts []EnqueueOption, inTx bool, seen func([]EnqueueOption)) (*plan, error) {
	var p *plan
	_, err := q.enqueueWith(ctx, task, opts, inTx, func(_ context.Context, opts []EnqueueOption) (Result, error) {
		var err error
		if seen != nil {
			seen(opts)
		}
		if p, err = q.prepare(task, opts); err != nil {
			return Result{}, err
		}
		return Result{ID: p.id, Action: ActionInserted}, nil
	})
	if err == nil && p == nil {
		err = errors.New("venturi: enqueue middleware returned without calling next or an error")
	}
	return p, err
}

// preparer is prepareWith for the jobs of a workflow.
func (q *Queue) preparer(ctx context.Context, inTx bool) func(Task, []EnqueueOption) (*plan, error) {
	return func(t Task, opts []EnqueueOption) (*plan, error) { return q.prepareWith(ctx, t, opts, inTx, nil) }
}

// enqueueWith runs the queue's enqueue middleware around do, which enqueues task with
// opts (the middleware's metadata appended as a last option).
func (q *Queue) enqueueWith(ctx context.Context, task Task, opts []EnqueueOption, tx bool,
	do func(context.Context, []EnqueueOption) (Result, error)) (Result, error) {
	if len(q.enqueueMW) == 0 || task == nil || (reflect.ValueOf(task).Kind() == reflect.Pointer && reflect.ValueOf(task).IsNil()) {
		return do(ctx, opts)
	}
	var o enqueueOpts
	for _, opt := range opts {
		if opt != nil {
			opt.applyEnqueue(&o)
		}
	}
	info := &EnqueueInfo{Task: task, Kind: task.Kind(), Queue: DefaultQueue, Meta: Meta{}, Tx: tx}
	if t, ok := task.(Queuer); ok {
		info.Queue = t.Queue()
	}
	if o.queue != "" {
		info.Queue = o.queue
	}
	maps.Copy(info.Meta, o.meta)
	next := func(ctx context.Context) (Result, error) {
		all := append(opts[:len(opts):len(opts)], enqueueOptionFunc(func(o *enqueueOpts) { o.meta = maps.Clone(info.Meta) }))
		return do(ctx, all)
	}
	for i := len(q.enqueueMW) - 1; i >= 0; i-- {
		mw, inner := q.enqueueMW[i], next
		next = func(ctx context.Context) (Result, error) { return mw(ctx, info, inner) }
	}
	return next(ctx)
}
