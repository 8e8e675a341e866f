package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// MaxPayloadBytes is the largest encoded payload (and carry) an enqueue accepts: 1 MiB.
const MaxPayloadBytes = 1 << 20

// Errors an enqueue returns for a task it refuses; nothing is written.
var (
	ErrEmptyKind       = errors.New("venturi: task kind is empty")
	ErrKindTooLong     = errors.New("venturi: task kind is longer than 128 bytes")
	ErrPayloadTooLarge = fmt.Errorf("venturi: encoded payload is larger than %d bytes", MaxPayloadBytes)
	ErrInvalidPayload  = errors.New("venturi: payload cannot be stored")
	ErrDedupKeyTooLong = fmt.Errorf("venturi: dedup key is longer than %d bytes", MaxDedupKeyBytes)
	ErrIsolation       = errors.New("venturi: an enqueue with a dedup key needs a READ COMMITTED transaction")
	ErrNotFound        = errors.New("venturi: job not found")
)

// Action says what an enqueue did. It is also what a merge method decides ([Merge.Decision]):
// ActionKept, ActionReplaced, ActionMerged and ActionIndependent are the four decisions.
type Action int

// Actions. ActionKept, ActionReplaced and ActionMerged act on an existing pending job,
// whose ID the result carries, and append a merged entry to its journal.
const (
	ActionInserted    Action = iota + 1 // a new job; no pending job had the dedup key
	ActionKept                          // Pending.Keep: the existing job is unchanged
	ActionReplaced                      // Pending.Replace: the payload is swapped, the carry reset
	ActionMerged                        // Pending.With: payload and carry computed by the merge
	ActionIndependent                   // Pending.Independent: a new job beside the pending one
)

// mergeName is the decision's name in a merged journal entry ("keep", "replace", "with",
// "independent"); stored journals use these names.
func (a Action) mergeName() string {
	switch a {
	case ActionKept:
		return "keep"
	case ActionReplaced:
		return "replace"
	case ActionMerged:
		return "with"
	case ActionIndependent:
		return "independent"
	}
	return a.String()
}

// String returns the action's lower-case name.
func (a Action) String() string {
	switch a {
	case ActionInserted:
		return "inserted"
	case ActionKept:
		return "kept"
	case ActionReplaced:
		return "replaced"
	case ActionMerged:
		return "merged"
	case ActionIndependent:
		return "independent"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Result is what one enqueue did, and the ID of the job that now holds the task.
type Result struct {
	ID     ulid.ULID
	Action Action
}

// EnqueueOption adjusts one enqueue; [At] and [After] make one.
type EnqueueOption interface {
	applyEnqueue(*enqueueOpts)
}

type enqueueOpts struct {
	at    *time.Time
	delay time.Duration
}

type enqueueOptionFunc func(*enqueueOpts)

func (f enqueueOptionFunc) applyEnqueue(o *enqueueOpts) { f(o) }

// At makes the job due at t instead of now.
func At(t time.Time) EnqueueOption { return enqueueOptionFunc(func(o *enqueueOpts) { o.at = &t }) }

// After makes the job due d after the enqueue runs, measured by the database clock.
func After(d time.Duration) EnqueueOption {
	return enqueueOptionFunc(func(o *enqueueOpts) { o.delay = d })
}

// Queue is the producer side: it enqueues tasks and reads jobs back. It is safe for
// concurrent use and needs nothing but a pool; it never names a worker's state type.
type Queue struct {
	pool    *pgxpool.Pool
	q       *dbsqlc.Queries
	channel string
	notify  *notifyLimiter
	poll    bool
}

// QueueConfig configures a Queue. The zero value is ready to use; like [Config], it is
// passed by value.
type QueueConfig struct {
	// NoNotify turns off the NOTIFY that wakes idle workers after an enqueue of due work.
	// Workers then find jobs by polling. Use it with connection poolers in transaction
	// mode, together with Config.PollOnly on the workers.
	NoNotify bool
	// NotifyEvery is the shortest interval between two NOTIFYs for one kind from this
	// Queue. A NOTIFY serializes commits cluster-wide, so it is debounced; workers that
	// wake keep fetching while they find work. Default 2ms.
	NotifyEvery time.Duration
}

// NewQueue returns a Queue on pool. The schema is the pool's search_path; run [Migrate]
// first.
func NewQueue(pool *pgxpool.Pool, cfg QueueConfig) *Queue {
	every := cfg.NotifyEvery
	if every <= 0 {
		every = 2 * time.Millisecond
	}
	return &Queue{
		pool:    pool,
		q:       dbsqlc.New(),
		channel: notifyChannel(pool),
		notify:  &notifyLimiter{every: every, last: map[string]time.Time{}},
		poll:    cfg.NoNotify,
	}
}

// notifyChannel names the wakeup channel after the pool's schema so that several
// venturi schemas in one database do not wake each other.
func notifyChannel(pool *pgxpool.Pool) string {
	schema := "public"
	if sp := pool.Config().ConnConfig.RuntimeParams["search_path"]; sp != "" {
		schema = sp
	}
	ch := "venturi_insert." + schema
	if len(ch) > 63 { // PostgreSQL truncates identifiers to 63 bytes; pg_notify refuses longer
		ch = ch[:63]
	}
	return ch
}

type notifyLimiter struct {
	mu    sync.Mutex
	every time.Duration
	last  map[string]time.Time
}

func (l *notifyLimiter) allow(kind string) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[kind]; ok && now.Sub(t) < l.every {
		return false
	}
	l.last[kind] = now
	return true
}

// Enqueue enqueues task in its own transaction.
func (q *Queue) Enqueue(ctx context.Context, task Task, opts ...EnqueueOption) (Result, error) {
	p, err := prepare(task, opts)
	if err != nil {
		return Result{}, err
	}
	if p.key == "" {
		b := &pgx.Batch{}
		q.queueInsert(b, p)
		return Result{ID: p.id, Action: ActionInserted}, q.pool.SendBatch(ctx, b).Close()
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
	p, err := prepare(task, opts)
	if err != nil {
		return Result{}, err
	}
	if p.key == "" {
		b := &pgx.Batch{}
		q.queueInsert(b, p)
		return Result{ID: p.id, Action: ActionInserted}, tx.SendBatch(ctx, b).Close()
	}
	return q.enqueueTx(ctx, tx, p)
}

// EnqueueMany enqueues tasks in one transaction and returns one result per task, in
// order. Tasks without a dedup key are inserted with a single statement.
func (q *Queue) EnqueueMany(ctx context.Context, tasks []Task, opts ...EnqueueOption) ([]Result, error) {
	var res []Result
	err := pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		res, err = q.enqueueMany(ctx, tx, tasks, opts)
		return err
	})
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
		return q.enqueueMany(ctx, tx, tasks, opts)
	}
	var res []Result
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { // a savepoint
		var err error
		res, err = q.enqueueMany(ctx, sp, tasks, opts)
		return err
	})
	return res, err
}

func (q *Queue) enqueueMany(ctx context.Context, tx pgx.Tx, tasks []Task, opts []EnqueueOption) ([]Result, error) {
	res := make([]Result, len(tasks))
	plain := dbsqlc.InsertJobsParams{}
	var keyed []int
	var plans []*plan
	due := map[string]bool{}
	for i, t := range tasks {
		p, err := prepare(t, opts)
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
		plain.Priorities = append(plain.Priorities, int16(p.priority))
		plain.Payloads = append(plain.Payloads, string(p.payload))
		plain.HasAt = append(plain.HasAt, p.opts.at != nil)
		var at time.Time
		if p.opts.at != nil {
			at = *p.opts.at
		}
		plain.Ats = append(plain.Ats, at)
		plain.DelaysUs = append(plain.DelaysUs, delayOf(p.opts.delay))
		if p.dueNow() {
			due[p.kind] = true
		}
	}
	if len(plain.Ids) > 0 {
		b := &pgx.Batch{}
		b.Queue(dbsqlc.InsertJobsSQL, plain.Ids, plain.Kinds, plain.Priorities, plain.Payloads,
			plain.HasAt, plain.Ats, plain.DelaysUs)
		if !q.poll {
			for kind := range due {
				b.Queue(dbsqlc.NotifySQL, q.channel, kind)
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

// plan is a validated, encoded task.
type plan struct {
	task     Task
	id       ulid.ULID
	kind     string
	key      string
	priority Priority
	payload  []byte
	opts     enqueueOpts
}

func (p *plan) dueNow() bool { return p.opts.at == nil && p.opts.delay <= 0 }

func (p *plan) atParam() *time.Time { return p.opts.at }

func (p *plan) insertIfNoCandidate() []any {
	return []any{p.kind, p.key, uuidOf(p.id), int16(p.priority), string(p.payload), p.atParam(), delayOf(p.opts.delay)}
}

func prepare(task Task, opts []EnqueueOption) (*plan, error) {
	if task == nil || (reflect.ValueOf(task).Kind() == reflect.Pointer && reflect.ValueOf(task).IsNil()) {
		return nil, errors.New("venturi: nil task")
	}
	p := &plan{task: task, id: ulid.Make(), kind: task.Kind(), priority: PriorityNormal}
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
	var err error
	if p.payload, err = encodeJSON(task); err != nil {
		return nil, err
	}
	return p, nil
}

// encodeJSON marshals v for a jsonb column, refusing what PostgreSQL would reject.
func encodeJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPayload, err)
	}
	if len(b) > MaxPayloadBytes {
		return nil, ErrPayloadTooLarge
	}
	// jsonb cannot store the NUL character; encoding/json writes it as \u0000.
	if containsEscapedNUL(b) {
		return nil, fmt.Errorf("%w: strings containing NUL (\\u0000) cannot be stored in jsonb", ErrInvalidPayload)
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
	key := pgtype.Text{String: p.key, Valid: p.key != ""}
	b.Queue(dbsqlc.InsertJobSQL, uuidOf(p.id), p.kind, int16(p.priority), key, string(p.payload),
		p.atParam(), delayOf(p.opts.delay))
	q.queueNotify(b, p)
}

func (q *Queue) notifyNow(ctx context.Context, db dbsqlc.DBTX, kind string) {
	if q.poll || !q.notify.allow(kind) {
		return
	}
	// Best effort: workers poll anyway.
	_ = q.q.Notify(ctx, db, dbsqlc.NotifyParams{Channel: q.channel, Payload: kind})
}

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
	b.Queue(dbsqlc.DedupLockSQL, p.kind, p.key).QueryRow(func(r pgx.Row) error { return r.Scan(&iso) })
	b.Queue(dbsqlc.InsertIfNoCandidateSQL, p.insertIfNoCandidate()...).QueryRow(func(r pgx.Row) error {
		var due bool
		return r.Scan(&inserted, &due)
	})
	q.queueNotify(b, p)
	err = db.SendBatch(ctx, b).Close()
	return iso, inserted, err
}

// queueNotify adds a debounced NOTIFY to b when p is due at once.
func (q *Queue) queueNotify(b *pgx.Batch, p *plan) {
	if p.dueNow() && !q.poll && q.notify.allow(p.kind) {
		b.Queue(dbsqlc.NotifySQL, q.channel, p.kind) // delivered at commit
	}
}

// replaceFast enqueues a dedup task whose type has no merge method, so a collision is
// always Replace: lock the key and replace-or-insert in one round trip. ok is false when
// the type has a merge method, or when db's transaction is not READ COMMITTED (the caller
// then takes the general path, which reports ErrIsolation where it applies).
func (q *Queue) replaceFast(ctx context.Context, db batcher, p *plan) (Result, bool, error) {
	if m, err := mergerFor(reflect.TypeOf(p.task)); err != nil || m.method.Func.IsValid() {
		return Result{}, false, nil // the general path reports a malformed merge on collision
	}
	entry := mergedEntry(ActionReplaced.mergeName(), p.id)
	var (
		iso           string
		id            pgtype.UUID
		replaced, due bool
	)
	b := &pgx.Batch{}
	b.Queue(dbsqlc.DedupLockSQL, p.kind, p.key).QueryRow(func(r pgx.Row) error { return r.Scan(&iso) })
	b.Queue(dbsqlc.InsertOrReplaceSQL, p.atParam(), delayOf(p.opts.delay), p.kind, p.key, string(p.payload),
		int16(p.priority), entry, uuidOf(p.id)).QueryRow(func(r pgx.Row) error {
		return r.Scan(&id, &replaced, &due)
	})
	q.queueNotify(b, p)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, false, err
	}
	if !id.Valid {
		return Result{}, false, nil
	}
	if replaced {
		return Result{ID: ulidOf(id), Action: ActionReplaced}, true, nil
	}
	return Result{ID: p.id, Action: ActionInserted}, true, nil
}

// mergedEntry is the journal entry an enqueue leaves in the pending job it merged into.
func mergedEntry(merge string, id ulid.ULID) string {
	return string(appendEntry(nil, &JournalEntry{Event: EventMerged, Merge: merge, Note: "merged enqueue " + id.String()}))
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
		return q.insertKeyed(ctx, tx, p, ActionInserted)
	}
	if err != nil {
		return Result{}, err
	}
	c := &candidate{id: ulidOf(row.ID), priority: row.Priority, payload: row.Payload, carry: row.Carry,
		runs: int(row.Runs), failures: int(row.Failures), journal: row.Journal}
	m, err := mergerFor(reflect.TypeOf(p.task))
	if err != nil {
		return Result{}, err
	}
	decision, with, carry, err := m.merge(p.task, c)
	if err != nil {
		return Result{}, fmt.Errorf("venturi: merge %s into job %s: %w", p.kind, c.id, err)
	}
	args := dbsqlc.MergeIntoParams{ID: row.ID, At: p.atParam(), DelayUs: delayOf(p.opts.delay)}
	action := decision
	switch decision {
	case ActionIndependent:
		return q.insertKeyed(ctx, tx, p, ActionIndependent)
	case ActionKept:
	case ActionReplaced:
		args.Replace, args.SetCarry = true, true
		args.Payload, args.Priority = string(p.payload), int16(p.priority)
	case ActionMerged:
		wp, err := prepare(with, nil)
		if err != nil {
			return Result{}, fmt.Errorf("venturi: merge result: %w", err)
		}
		if wp.kind != p.kind || wp.key != p.key {
			return Result{}, fmt.Errorf("venturi: merge of %s/%s returned a task with kind %q and key %q; With must keep both", p.kind, p.key, wp.kind, wp.key)
		}
		cb, err := encodeJSON(carry)
		if err != nil {
			return Result{}, fmt.Errorf("venturi: merge carry: %w", err)
		}
		args.Replace, args.SetCarry = true, true
		args.Payload, args.Priority, args.Carry = string(wp.payload), int16(wp.priority), string(cb)
	}
	args.Entry = mergedEntry(decision.mergeName(), p.id)
	due, err := q.q.MergeInto(ctx, tx, args)
	if err != nil {
		return Result{}, err
	}
	if due && action != ActionKept {
		q.notifyNow(ctx, tx, p.kind)
	}
	return Result{ID: c.id, Action: action}, nil
}

func (q *Queue) insertKeyed(ctx context.Context, tx pgx.Tx, p *plan, action Action) (Result, error) {
	b := &pgx.Batch{}
	q.queueInsert(b, p)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return Result{}, err
	}
	return Result{ID: p.id, Action: action}, nil
}

// State is a job's lifecycle state.
type State string

// Lifecycle states; see the package documentation for the transitions.
const (
	StateScheduled State = "scheduled"
	StateAvailable State = "available"
	StateRunning   State = "running"
	StateCompleted State = "completed"
	StateDead      State = "dead"
)

// Job is a stored job as read back by [Queue.Job].
type Job struct {
	ID          ulid.ULID
	Kind        string
	State       State
	Priority    Priority
	DedupKey    DedupKey
	Payload     json.RawMessage
	Carry       json.RawMessage
	RunAt       time.Time
	RunCount    int
	Failures    int
	Journal     []JournalEntry
	CreatedAt   time.Time
	AttemptedAt *time.Time
	FinishedAt  *time.Time
}

// Job reads one job with its journal. It returns [ErrNotFound] for an unknown ID,
// including one whose job was pruned.
func (q *Queue) Job(ctx context.Context, id ulid.ULID) (*Job, error) {
	row, err := q.q.GetJob(ctx, q.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	j := &Job{
		ID: id, Kind: row.Kind, State: State(row.State), Priority: Priority(row.Priority),
		DedupKey: DedupKey(row.DedupKey.String), Payload: row.Payload, Carry: row.Carry,
		RunAt: row.RunAt, RunCount: int(row.Runs), Failures: int(row.Failures),
		CreatedAt: row.CreatedAt, AttemptedAt: row.AttemptedAt, FinishedAt: row.FinishedAt,
	}
	if err := json.Unmarshal(row.Journal, &j.Journal); err != nil {
		return nil, fmt.Errorf("venturi: decode journal of %s: %w", id, err)
	}
	return j, nil
}

func uuidOf(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func ulidOf(u pgtype.UUID) ulid.ULID { return ulid.ULID(u.Bytes) }
