// Package venturi is a durable job queue on PostgreSQL.
//
// One struct is a job's payload and its identity. Producers enqueue it knowing only
// [Task]; workers run it through [Handler], which adds execution against the worker's
// shared state. Every run of a job is recorded in its journal with a note and an
// attachment; every write of a run is fenced by the token of the lease it was claimed
// under.
//
// # The task model in Go
//
// The model comes from a Rust design with an associated const (KIND), an associated
// type (Carry) and Self-typed methods. Go has none of them, so:
//
//   - The kind is a method callable on the zero value: func (FetchBookmark) Kind() string.
//   - Optional policy is optional interfaces, checked with a type assertion the way
//     encoding/json checks for Marshaler: [Prioritizer], [Deduplicator], [BackoffPolicy].
//   - The carry type C appears in the handler's signature,
//     Handle(ctx, *Run[C], S) (Outcome, error), and [Register] infers both the state type
//     S and C from it: Register[FetchBookmark](w). The library owns no enum of task types;
//     the registry is keyed by kind and homogeneous in S.
//   - Merge is a typed method, Merge(Pending[T, C]) Merge[T, C]. Producer code only holds
//     a [Task], so venturi finds the method by reflection once per type, and only on a
//     dedup collision; the decision constructors are methods on [Pending], so user code
//     never spells type arguments: existing.Keep(), existing.Replace(),
//     existing.With(task, carry), existing.Independent(). Register rejects a task whose
//     merge carry differs from its handler's carry.
//
// A producer binary imports the task types and this package; it never names the worker's
// state type. A worker binary adds Handle methods to the same structs and registers them,
// or, when the structs live in a producer package it cannot add methods to, registers a
// function per type with [RegisterFunc].
//
// # Lifecycle
//
// A job is in one of five states. scheduled and available are "pending": they are the
// merge candidates of a dedup enqueue.
//
//	from       to         when                                             journal event
//	(enqueue)  available  due now                                          -
//	(enqueue)  scheduled  due later (At, After)                            -
//	scheduled  available  due time reached (promotion, any worker)         -
//	pending    pending    a dedup enqueue merged Keep / Replace / With     merged
//	available  running    claimed under a lease with a new fencing token   -
//	running    completed  handler returned Completed                       completed
//	running    available  Pause(0), retry with zero backoff, shutdown      paused / failed / interrupted
//	running    scheduled  Pause(d > 0), retry with backoff                 paused / failed
//	running    dead       Permanent error, backstop reached, undecodable   dead
//	running    available  lease expired (worker died or stalled)           abandoned
//	running    dead       lease expired and the backstop was reached       abandoned
//	running    available  shutdown released a claimed, unstarted job       (none: it never ran)
//	completed  (deleted)  older than Config.RetainCompleted                -
//	dead       (deleted)  older than Config.RetainDead                     -
//
// Failures (errors, panics, timeouts and abandoned runs) count toward the backstop
// (Config.MaxFailures); pauses and interruptions never do.
//
// # Claiming, leases and fencing
//
// A worker claims due jobs of the kinds it registered with FOR UPDATE SKIP LOCKED, most
// urgent priority first, then by due time, then by ID, in batches that fill its free
// handler slots and a prefetch buffer (Config.Prefetch). The buffer adapts: it grows
// while handlers finish faster than claims arrive, so that a backlog of quick jobs is
// worked in large claims, and stays small while handlers are busy, so that a worker does
// not hoard jobs other workers could run. One claim and one batch of results are in
// flight at a time. Each claim sets a lease (now() + Config.Lease) and a fresh fencing
// token.
// Every later write of the run (lease extension, completion, pause, failure, carry,
// attachment, [Run.CompleteTx]) matches the token and must affect exactly one row;
// otherwise the run was lost and its writes are discarded ([ErrLeaseLost]). Leases of
// running jobs are extended every Lease/3 in one statement per worker. A worker that
// cannot extend a lease cancels that handler's context before the lease runs out; a lease
// that does expire is rescued back to available by whichever worker holds the
// maintenance lock, with an abandoned journal entry.
//
// Results are written in batches: a busy worker finishes many runs per statement, an idle
// one writes at once. A result counts as done when its batch commits.
//
// Idle workers are woken by LISTEN/NOTIFY; polling (Config.PollInterval) always runs as
// a fallback, and Config.PollOnly with QueueConfig.NoNotify serve connection poolers.
//
// # Deduplication
//
// An enqueue with a dedup key takes a transaction-scoped advisory lock on (kind, key),
// then looks for the newest pending job with that key through a partial index. With none,
// it inserts; otherwise the task's merge decides. Because the lock is held until the
// enqueuing transaction ends, concurrent enqueues of one key are serialized, and a
// rollback simply releases the lock to the next enqueuer, which then sees no row. The
// candidate lookup must take its snapshot after the lock, so a dedup enqueue requires
// READ COMMITTED ([ErrIsolation] otherwise). Enqueue cost does not depend on the backlog.
//
// # Time
//
// Every instant that decides whether a job is due or a lease has run out is PostgreSQL's
// now(). Workers pass durations, never timestamps, so a worker with a wrong clock behaves
// correctly.
//
// See the README for the guarantees, every configuration field and its default, and the
// examples for complete programs.
package venturi
