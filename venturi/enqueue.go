package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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
	meta   Meta // WithMeta, enqueue middleware
	events bool // WithEvents
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
	if _, inserted, err := q.lockAndInsert(ctx, q.pool, p); err != nil || inserted {
		return Result{ID: p.id, Action: ActionInserted}, err
	}
	// A collision (or a server whose default isolation is not READ COMMITTED): merge
	// under the key's lock in an explicit READ COMMITTED transaction.
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
		var p *plan
		_, err := q.enqueueWith(ctx, t, opts, inTx, func(_ context.Context, opts []EnqueueOption) (Result, error) {
			var err error
			if used != nil {
				used[i] = opts
			}
			if p, err = q.prepare(t, opts); err != nil {
				return Result{}, err
			}
			return Result{ID: p.id, Action: ActionInserted}, nil
		})
		if err == nil && p == nil {
			err = errors.New("venturi: enqueue middleware returned without calling next or an error")
		}
		if err != nil {
			return nil, fmt.Errorf("task %d: %w", i, err)
		}
		plans = append(plans, p)
		if p.key != "" {
			keyed = append(keyed, i)
			continue
		}
		res[i] = Result{ID: p.id, Action: ActionInserted}
		plain.Ids = append(plain.Ids, uuidOf(p.id))
		plain.Kinds = append(plain.Kinds, p.kind)
		plain.Queues = append(plain.Queues, p.queue)
		plain.Priorities = append(plain.Priorities, int16(p.priority))
		plain.Payloads = append(plain.Payloads, string(p.payload))
		plain.HasAt = append(plain.HasAt, p.opts.at != nil)
		var at time.Time
		if p.opts.at != nil {
			at = *p.opts.at
		}
		plain.Ats = append(plain.Ats, at)
		plain.DelaysUs = append(plain.DelaysUs, delayOf(p.opts.delay))
		plain.HasPart = append(plain.HasPart, p.part.Valid)
		plain.Parts = append(plain.Parts, p.part.String)
		plain.SlotKeys = append(plain.SlotKeys, p.slot.Key)
		plain.SlotLimits = append(plain.SlotLimits, int32(p.slot.Limit))
		plain.SlotPolicies = append(plain.SlotPolicies, int16(p.slot.Policy))
		plain.Events = append(plain.Events, p.events)
		plain.Metas = append(plain.Metas, string(p.meta))
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
	for _, i := range keyed {
		r, err := q.enqueueTx(ctx, tx, plans[i])
		if err != nil {
			return nil, fmt.Errorf("task %d: %w", i, err)
		}
		res[i] = r
	}
	return res, nil
}

// dueNow reports whether p is due as soon as it commits (no At or After).
func (p *plan) dueNow() bool { return p.opts.at == nil && p.opts.delay <= 0 }

// plan is a validated, encoded task.
type plan struct {
	task     Task
	id       ulid.ULID
	kind     string
	queue    string
	key      string
	priority Priority
	payload  []byte
	opts     enqueueOpts
	part     pgtype.Text // the partition (or slot key) of a gated job; NULL: plain, unless its kind has limits
	slot     Slot        // Key empty: none
	events   bool        // the job opts in to the durable event stream
	meta     []byte      // the job's metadata (nil: none)
}

// prepare is the package's prepare with the queue's own settings (StreamEvents).
func (q *Queue) prepare(task Task, opts []EnqueueOption) (*plan, error) {
	p, err := prepare(task, opts)
	if err != nil {
		return nil, err
	}
	p.events = p.events || q.streamEvents
	return p, nil
}

func prepare(task Task, opts []EnqueueOption) (*plan, error) {
	if _, ok := task.(Supervised); ok {
		return nil, fmt.Errorf("%w: %T", ErrSingleton, task)
	}
	return prepareTask(task, opts)
}

// prepareTask is prepare without the refusal of singleton kinds (EnsureSingleton's).
func prepareTask(task Task, opts []EnqueueOption) (*plan, error) {
	if task == nil || (reflect.ValueOf(task).Kind() == reflect.Pointer && reflect.ValueOf(task).IsNil()) {
		return nil, errors.New("venturi: nil task")
	}
	p := &plan{task: task, id: ulid.Make(), kind: task.Kind(), queue: DefaultQueue, priority: PriorityNormal}
	for _, o := range opts {
		if o != nil {
			o.applyEnqueue(&p.opts)
		}
	}
	if p.kind == "" {
		return nil, ErrEmptyKind
	}
	if len(p.kind) > 128 || !utf8.ValidString(p.kind) {
		return nil, ErrKindTooLong
	}
	if t, ok := task.(Queuer); ok {
		p.queue = t.Queue()
	}
	if p.opts.queue != "" {
		p.queue = p.opts.queue
	}
	if !validQueue(p.queue) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidQueue, p.queue)
	}
	if t, ok := task.(Slotter); ok {
		p.slot = t.Slot()
		if p.slot.Key != "" {
			if !validText(p.slot.Key, MaxSlotKeyBytes) || p.slot.Limit < 0 || p.slot.Policy < SlotQueue || p.slot.Policy > SlotDropIfRunning {
				return nil, ErrInvalidSlot
			}
			p.slot.Limit = max(p.slot.Limit, 1)
			p.part = pgtype.Text{String: p.slot.Key, Valid: true}
		}
	}
	if t, ok := task.(Partitioner); ok {
		if part := t.Partition(); part != "" {
			if !validText(part, MaxPartitionBytes) {
				return nil, ErrInvalidPartition
			}
			p.part = pgtype.Text{String: part, Valid: true}
		}
	}
	if t, ok := task.(Prioritizer); ok {
		p.priority = t.Priority().clamp()
	}
	if t, ok := task.(Deduplicator); ok {
		p.key = string(t.DedupKey())
		if len(p.key) > MaxDedupKeyBytes {
			return nil, ErrDedupKeyTooLong
		}
		if !utf8.ValidString(p.key) || containsNUL(p.key) {
			return nil, fmt.Errorf("%w: dedup key is not valid UTF-8 text", ErrInvalidPayload)
		}
	}
	if t, ok := task.(EventStreamer); ok && t.StreamEvents() {
		p.events = true
	}
	p.events = p.events || p.opts.events
	var err error
	if p.meta, err = encodeMeta(p.opts.meta); err != nil {
		return nil, err
	}
	if p.payload, err = encodeJSON(task); err != nil {
		return nil, err
	}
	return p, nil
}

// encodeJSON marshals v (a payload, a step's result, a signal's payload) for a jsonb
// column, refusing what PostgreSQL would reject.
func encodeJSON(v any) ([]byte, error) { return encodeValue(v, ErrInvalidPayload, ErrPayloadTooLarge) }

// encodeCarry is encodeJSON for a run's carry: its errors name the carry.
func encodeCarry(v any) ([]byte, error) { return encodeValue(v, ErrInvalidCarry, ErrCarryTooLarge) }

// encodeValue marshals v for a jsonb column; invalid and tooLarge are the errors that name
// what v is.
func encodeValue(v any, invalid, tooLarge error) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", invalid, err)
	}
	if len(b) > MaxPayloadBytes {
		return nil, tooLarge
	}
	// jsonb cannot store the NUL character; encoding/json writes it as \u0000.
	if containsEscapedNUL(b) {
		return nil, fmt.Errorf("%w: strings containing NUL (\\u0000) cannot be stored in jsonb", invalid)
	}
	return b, nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func containsEscapedNUL(b []byte) bool {
	const esc = `\u0000`
	for i := 0; i+len(esc) <= len(b); i++ {
		if b[i] == '\\' {
			if string(b[i:i+len(esc)]) == esc {
				// An escaped backslash followed by "u0000" is text, not NUL.
				n := 0
				for j := i - 1; j >= 0 && b[j] == '\\'; j-- {
					n++
				}
				if n%2 == 0 {
					return true
				}
			}
		}
	}
	return false
}

// queueInsert adds the plain insert of p (and its NOTIFY) to b.
func (q *Queue) queueInsert(b *pgx.Batch, p *plan) {
	sk, sl, sp := p.slotParams()
	dbsqlc.QueueInsertJob(b, dbsqlc.InsertJobParams{
		Part: p.part, SlotKey: sk, SlotLimit: sl, SlotPolicy: sp,
		ID: uuidOf(p.id), Kind: p.kind, Queue: p.queue, Priority: int16(p.priority),
		DedupKey: pgtype.Text{String: p.key, Valid: p.key != ""},
		Payload:  string(p.payload), At: p.opts.at, DelayUs: delayOf(p.opts.delay),
		Events: p.events, Meta: p.meta,
	})
	q.queueNotify(b, p)
}
