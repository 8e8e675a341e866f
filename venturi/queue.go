package venturi

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/awaiter"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/notifier"
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

// Queue is the producer side: it enqueues tasks and reads jobs back. It is safe for
// concurrent use and needs nothing but a pool; it never names a worker's state type.
type Queue struct {
	pool        *pgxpool.Pool
	q           *dbsqlc.Queries
	channel     string
	doneChannel string // where ends of awaited jobs are notified
	notify      *notifyLimiter
	poll        bool
	awaitOnce   sync.Once
	await       *awaiter.Awaiter
	awaitWfOnce sync.Once
	awaitWf     *awaiter.Awaiter // AwaitWorkflow's
	listenOnce  sync.Once
	listen      *notifier.Notifier // the process's LISTEN connection for Await and WaitEvents
	eventsMu    sync.Mutex
	eventsCh    string // the event stream's channel, once read from the schema

	enqueueMW    []EnqueueMiddleware
	streamEvents bool
	hub          eventHub // in-process events of this Queue's enqueues and cancels
}

// QueueConfig configures a Queue. The zero value is ready to use; like [Config], it is
// passed by value.
type QueueConfig struct {
	// NoNotify turns off the NOTIFY that wakes idle workers after an enqueue (of due or
	// delayed work). Workers then find jobs by polling. Use it with connection poolers in
	// transaction mode, together with Config.PollOnly on the workers.
	//
	// The NOTIFY runs in the enqueue's transaction, so that it is delivered only if the
	// job commits. If it fails (the server's notification queue is full because a
	// listener stopped reading), the enqueue returns the error and the transaction is
	// aborted: the job is not enqueued. Fix the stuck listener, or set NoNotify.
	NoNotify bool
	// NotifyEvery is the shortest interval between two NOTIFYs for one kind from this
	// Queue. A NOTIFY serializes commits cluster-wide, so it is debounced; workers that
	// wake keep fetching while they find work. Default 2ms.
	NotifyEvery time.Duration
	// Middleware wraps every enqueue (see [EnqueueMiddleware]); the first is the
	// outermost.
	Middleware []EnqueueMiddleware
	// StreamEvents opts every job this Queue enqueues in to the durable event stream
	// (see [Queue.Events]), whatever its task type says.
	StreamEvents bool
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

		enqueueMW:    slices.Clone(cfg.Middleware),
		streamEvents: cfg.StreamEvents,

		doneChannel: doneChannel(pool),
	}
}

// notifier returns the Queue's one LISTEN connection, shared by every Await and WaitEvents
// of the process that uses this Queue: waiters hold no pool connection while they wait.
func (q *Queue) notifier() *notifier.Notifier {
	q.listenOnce.Do(func() {
		cc := q.pool.Config().ConnConfig
		q.listen = notifier.New(func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) },
			notifyLinger, AwaitPoll, slog.Default())
	})
	return q.listen
}

// notifyLinger is how long the LISTEN connection stays open without waiters, so that
// bursts of waits do not connect and disconnect each time.
const notifyLinger = 30 * time.Second

// doneChannel names the channel of awaited jobs' ends after the pool's schema.
func doneChannel(pool *pgxpool.Pool) string {
	schema := "public"
	if sp := pool.Config().ConnConfig.RuntimeParams["search_path"]; sp != "" {
		schema = sp
	}
	return channelName("venturi_done." + schema)
}

// notifyChannel names the wakeup channel after the pool's schema so that several
// venturi schemas in one database do not wake each other.
func notifyChannel(pool *pgxpool.Pool) string {
	schema := "public"
	if sp := pool.Config().ConnConfig.RuntimeParams["search_path"]; sp != "" {
		schema = sp
	}
	return channelName("venturi_insert." + schema)
}

// channelName cuts ch to PostgreSQL's 63-byte identifier limit at a character boundary,
// as the server cuts a LISTEN identifier (pg_notify refuses a longer name instead). Two
// schemas whose names share a long prefix then share a channel: their workers wake each
// other, which costs a claim, never a job.
func channelName(ch string) string {
	const maxIdentifierBytes = 63
	if len(ch) <= maxIdentifierBytes {
		return ch
	}
	cut := maxIdentifierBytes
	for cut > 0 && !utf8.RuneStart(ch[cut]) {
		cut--
	}
	return ch[:cut]
}

// Subscribe delivers, in process, the events of this Queue value's own enqueues
// (enqueued, merged: Enqueue and EnqueueMany), once they commit. Enqueues in the caller's
// transaction (EnqueueTx, EnqueueManyTx) are not delivered: whether they commit is the
// caller's. Other processes' enqueues, and what happens to the jobs later, are in
// the durable stream ([Queue.Events]) and on the workers ([Worker.Subscribe]).
func (q *Queue) Subscribe(cfg SubscribeConfig) *Subscription { return q.hub.subscribe(cfg) }
