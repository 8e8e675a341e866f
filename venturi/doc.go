// Package venturi is a durable job queue on PostgreSQL.
//
// A job is a Go struct: its JSON encoding is the payload, and its type is the job's
// identity. Producers enqueue it through a [Queue], knowing only [Task]; workers run it
// through a [Worker], which adds a Handle method (or a [HandlerFunc]) over the worker's
// shared state. Every run of a job is recorded in its journal with a note and an
// attachment, and every write of a run is fenced by the token of the lease it was
// claimed under.
//
// # Defining a task
//
// A task type names its kind with a method callable on the zero value; optional
// interfaces add enqueue-time policy:
//
//   - Kind() string is required ([Task]). It must be unique and stable: it is stored
//     with the payload and routes the job back to its handler.
//   - Priority() Priority ([Prioritizer]) orders claims; higher runs first.
//   - Queue() string ([Queuer]) puts the jobs in a named queue ([OnQueue] overrides it
//     per enqueue); a worker serves [Config].Queue ([DefaultQueue] unless set) or the
//     queues of [Config].Queues, each with its own concurrency.
//   - DedupKey() DedupKey ([Deduplicator]) makes an enqueue merge into a pending job of
//     the same kind and key instead of adding one.
//   - Merge(Pending[T, C]) Merge[T, C] decides that merge: keep the pending job, replace
//     its payload, combine both (With) or enqueue independently. Without it, a
//     collision replaces. Its constructors are methods on [Pending], so code reads
//     existing.Keep(), existing.Replace(), existing.With(task, carry).
//     The decision also says how the pending job's due time moves: [Merge.Throttle]
//     keeps it, [Merge.Debounce] pushes it to now + delay with a maximum wait from the
//     burst's start, [Merge.Earliest] (the default of Replace and With) takes the earlier.
//   - MergeRule() MergeRule ([RuleMerger]) declares instead a merge that does not read
//     the jobs ([KeepPending], [ReplacePending]): Go enqueues apply it, and enqueues from
//     SQL apply it in the database (below).
//   - Backoff() Backoff ([BackoffPolicy]) overrides the worker's retry backoff.
//   - Slot() Slot ([Slotter]), Partition() string ([Partitioner]) and Limits() Limits
//     ([Limiter]) put the jobs under flow control (below).
//   - Singleton() Singleton ([Supervised]) makes the kind a supervised singleton service
//     (below).
//
// The worker side adds Handle(ctx, *Run[C], S) (Outcome, error) to the same struct
// ([Handler]) and registers it with Register[T](w), which infers the state type S and
// the carry type C from the method. When the task struct lives in a producer package
// that the worker cannot add methods to, [RegisterFunc] registers a function instead.
// A producer binary imports the task types and this package; it never names the
// worker's state type.
//
// # Enqueue from SQL
//
// The schema provides a SQL API (version 1, migration *_venturi_sql_api): venturi_enqueue
// and venturi_enqueue_many enqueue in the caller's transaction from any client, a trigger
// (a transactional outbox) or a producer in another language, with the Go path's validation
// (errors with a SQLSTATE and the field), dedup lock, flow control and wake-up;
// venturi_cancel, venturi_signal and venturi_job_status cancel, signal and read jobs. A
// dedup collision applies the kind's merge as its workers record it at start: Replace, or
// a [MergeRule], in SQL; a kind whose Merge method is Go code has the enqueue wait until a
// Go process that knows the type merges it (a worker of the kind, or a Go enqueue of the
// same key, before its own). See the README, "Enqueue from SQL".
//
// # Outcomes
//
// A handler returns [Completed] (or [CompletedWith] a note), [Cancelled] with a reason,
// [PauseIn] a duration (the
// job runs again later with its carry — the typed state C kept between runs — and the
// pause is not a failure), or an error. A plain error retries with Fibonacci backoff
// and deterministic jitter; [RetryIn] sets the delay; [Permanent] sends the job to dead
// at once; after Config.MaxFailures failures the backstop sends it to dead.
//
// # Lifecycle
//
// A job is in one of seven states. scheduled and available are "pending": they are the
// merge candidates of a dedup enqueue.
//
//	from       to         when                                             journal event
//	(enqueue)  available  due now                                          -
//	(enqueue)  scheduled  due later (At, After)                            -
//	scheduled  available  due time reached (promotion, any worker)         -
//	pending    pending    a dedup enqueue merged Keep / Replace / With     merged
//	                      (its due time moved by the merge's DuePolicy)
//	available  running    claimed under a lease with a new fencing token   -
//	running    completed  handler returned Completed                       completed
//	running    available  PauseIn(0), retry with zero backoff, shutdown    paused / failed / interrupted
//	running    scheduled  PauseIn(d > 0), retry with backoff               paused / failed
//	running    dead       Permanent error, backstop reached, undecodable   dead
//	running    available  lease expired (worker died or stalled)           abandoned
//	running    dead       lease expired and the backstop was reached       abandoned
//	running    available  shutdown released a claimed, unstarted job       (none: it never ran)
//	running    cancelled  a newer job of its slot replaced it (SlotReplace) replaced
//	available  cancelled  its slot was full (SlotDropIfRunning)            dropped
//	running    waiting    WaitForSignal(timeout, names)                    waiting
//	waiting    available  a signal it waits for, or the timeout            -
//	pending    cancelled  Queue.Cancel (pending includes waiting)          cancelled
//	running    cancelled  Queue.Cancel (run asked to stop), or Cancelled   cancelled
//	finished   available  Queue.RetryJobs (dead, cancelled, completed)     retried
//	scheduled  available  Queue.RetryJobs                                  retried
//	any        (deleted)  Queue.DeleteJobs (every state but running)       -
//	completed  (deleted)  its end plus Config.RetainCompleted passed        -
//	cancelled  (deleted)  its end plus Config.RetainCompleted passed        -
//	dead       (deleted)  its end plus Config.RetainDead passed             -
//
// Failures (errors, panics, timeouts and abandoned runs) count toward the backstop;
// pauses and interruptions never do. A job that ends (completed, dead, cancelled) moves
// from venturi_job, the table the claims work on, to the history of finished jobs
// (venturi_job_history, partitioned on the time each job may be pruned): retention drops
// whole partitions. [Queue.Job], [Queue.ListJobs] and the other reads find a job in either.
//
// # Claiming, leases and fencing
//
// A worker claims due jobs of the kinds it registered with FOR UPDATE SKIP LOCKED, most
// urgent priority first, then by due time, then by ID, in batches that fill its free
// handler slots and a prefetch buffer (Config.Prefetch) that adapts to how fast the
// handlers are. Each claim sets a lease (now() + Config.Lease) and a fresh fencing
// token. Every later write of the run (lease extension, completion, pause, failure,
// carry, attachment, [Run.CompleteTx]) matches the token; a run that no longer holds
// its job has its writes discarded ([ErrLeaseLost]). Leases are extended every Lease/3
// in one statement per worker; a worker that cannot extend a lease cancels that
// handler's context before the lease runs out, and a lease that does expire is rescued
// back to available by whichever worker holds the maintenance lock.
//
// Results are written in batches: a busy worker finishes many runs per statement, an
// idle one writes at once. A result counts as done when its batch commits. A failure to
// write that [IsTransient] classifies as transient (a broken connection, a restarting
// server) is retried with the same result; only a refusal of the data stores the
// result without its carry and attachment.
//
// Idle workers are woken by LISTEN/NOTIFY; polling (Config.PollInterval) always runs
// as a fallback, and Config.PollOnly with QueueConfig.NoNotify serve connection
// poolers in transaction mode.
//
// # Flow control
//
// The database enforces, in the claim and across all workers: a queue's pause
// ([Queue.PauseQueue], durable) and concurrency ([Queue.SetQueueConcurrency]); per-key
// slots ([Slot]: at most Limit jobs with a key run at once, with the policies
// [SlotQueue], [SlotReplace] and [SlotDropIfRunning]); a kind's concurrency, rate (N
// starts per period, optionally per partition) and circuit breaker ([Limits]); and
// fairness between the partitions of a queue ([Partitioner], in virtual-time order). Jobs under any
// of these are "gated" and claimed by their own statement; plain jobs pay nothing for it.
// Running counts are read from the job rows themselves, so a slot held by a killed
// worker frees when the lease rescue returns its job. [Queue.Circuits] shows breakers.
//
// # Coordination
//
// A producer can cancel a job ([Queue.Cancel], or [Queue.CancelTx] in its own
// transaction) and wait for any job to end ([Queue.Await]). A run can wait durably for a
// named signal with a timeout ([WaitForSignal], [Queue.Signal], [Queue.SignalTx]; the next
// run learns of it with [Run.Waited] and [Run.Signals]), hand out a secret token that sends it one
// ([Run.CreateHook], [Queue.ResumeHook]), and be written as memoized steps that a rerun
// skips ([Step], [StepTx]).
//
// # Workflows
//
// A [Workflow] is a graph of tasks enqueued together ([Queue.EnqueueWorkflow]): each node
// is a job that waits, in [StateBlocked], until the nodes it needs allow it ([Needs]: all
// completed; [NeedsEnded]: all ended; [NeedsFailure]: one failed), or a group its members
// join ([In]). A node that can no longer run ends cancelled with the reason; a retry of a
// member decides again what was decided because of it; [Queue.CancelWorkflow] ends the
// rest. Readiness is kept as counters in the workflow's own tables, so retention never
// changes a running workflow. A run stores its result for the nodes downstream
// ([Run.SetOutput], read with [Run.UpstreamOutputs]) and fans out at run time
// ([Run.Spawn]: nodes written with its completion); [Queue.AddToWorkflow] adds nodes,
// [Queue.RetryWorkflow] re-runs what failed, [Queue.AwaitWorkflow] waits for the end.
//
// A [Batch] is a set of jobs with callbacks ([OnSuccess], [OnEnd], [OnFailure]), each run
// at most once, with exact counts ([Run.Batch]); open batches take members from anywhere
// ([Queue.AddToBatch]) until [Queue.SealBatch].
//
// A chunked kind ([RegisterChunks]) hands its claimed jobs to one handler call, up to a
// size per key, each job keeping its own lease, journal and outcome ([ChunkItem]).
//
// # Supervised singletons
//
// A [Supervised] kind has one live job across the cluster: every worker that registers
// it ensures the job at Start ([Queue.EnsureSingleton]; a unique index makes this exact),
// and the job takes a slot of limit 1, so at most one run is in progress. Its
// [RestartPolicy] decides what follows a run's end: [RestartOnFailure] (retry with
// backoff, stop when it completes), [RestartAlways] (run again a fixed Delay after every
// end) or [RestartNever]. A handler may run for hours: its lease is extended, JobTimeout
// does not apply, and [Run.Checkpoint] stores its carry as it goes. When its worker dies,
// the lease rescue hands the job to another worker, which resumes from the checkpoint;
// when its worker stops, the run sees [Run.Shutdown], pauses, and another worker claims it
// at once. [Queue.Singletons] and [Job].Owner show where it runs.
//
// # Durable cron
//
// [Queue.Schedule] registers a [Schedule]: a cron expression (five fields, or six with
// seconds), a time zone, the [Task] each fire enqueues and a [MissedPolicy] for fires no
// worker enqueued in time ([MissedOnce], the default: one job for all of them;
// [MissedSkip]; [MissedBackfill], capped). The schedule and its ledger live in the
// database: any worker fires any due schedule, each fire time enqueues once (a ledger row
// keyed by schedule and fire time, written with the job), and no worker's memory or
// leadership is involved, so restarts and deploys neither skip nor repeat fires.
// Registering is idempotent from every service; [Queue.PauseSchedule],
// [Queue.ResumeSchedule], [Queue.RemoveSchedule], [Queue.Schedules] and
// [Queue.ScheduleFires] manage and show them; [Schedule.NextFires] computes fire times
// (DST rules in the README).
//
// # The journal
//
// Each run appends one [JournalEntry] to its job's journal, and each merge one more. The
// job's row keeps the recent entries ([JournalRecent]), which a claim hands to the run as
// [Run.History]; older ones move to the table venturi_journal ([Run.EarlierHistory],
// [Queue.Journal] page through them), which keeps [JournalMovedKept] per job and counts
// the dropped rest ([Job].JournalDropped). A run therefore costs the same at run 100,000
// as at run 1, and no job grows without bound.
//
// # Lifecycle events and middleware
//
// [Worker.Subscribe] delivers the events of a worker's own runs in process, and
// [Queue.Subscribe] a Queue's own enqueues, through a bounded buffer that never blocks
// the sender: drops are counted and reported ([Subscription], [EventOverflow]). Jobs
// that opt in ([EventStreamer], [QueueConfig].StreamEvents, [WithEvents]) have every
// transition written to a durable stream in the statement that makes it; any process
// reads it with [Queue.Events] or [Queue.WaitEvents] and an [EventCursor] that misses
// nothing and repeats nothing across restarts (each event carries its transaction's ID,
// and a read stops below the oldest running transaction).
//
// [WorkMiddleware] wraps every handler call and [EnqueueMiddleware] every enqueue; the
// first registered is the outermost. A job's [Meta] (set with [WithMeta] or by enqueue
// middleware) rides to its runs, for trace context or a tenant.
//
// # Operations
//
// [Queue.ListJobs] pages through the jobs a [JobFilter] matches ([ParseJobFilter] reads the
// grammar the CLI and the dashboard share) in each state's index order, searching a term
// no index serves a window of [ListSearchWindow] jobs per page (JobPage.Partial), so that
// every page costs about the same at any table size; [Queue.JobDetail]
// reads one job with its runs, steps, signals and hooks; [Queue.RetryJobs],
// [Queue.CancelJobs] and [Queue.DeleteJobs] act on everything a filter matches, in batches,
// with dry runs; [Queue.Stats] and [Queue.StatsHistory] read the stats tables that the
// maintaining worker samples (never counting jobs on request); [Queue.Explain] shows what
// an enqueue would do now, and [Queue.ExplainJob] why a job is where it is; every operator
// action is recorded in the audit log ([WithActor], [Queue.AuditLog]). [MigrationStatus]
// says which migrations a schema has, without migrating.
//
// # Shutdown
//
// [Worker.Stop] stops claiming, releases prefetched jobs, signals running handlers
// ([Run.Shutdown]) and gives them Config.ShutdownGrace before cancelling their
// contexts; interrupted runs return to available without counting as failures. Stop
// returns by its context's deadline whatever the database does; what it could not
// write is recovered by lease expiry and rescue.
//
// # Deduplication
//
// An enqueue with a dedup key takes a transaction-scoped advisory lock on (kind, key),
// then looks for the newest pending job with that key through a partial index. With
// none, it inserts; otherwise the task's merge decides. Because the lock is held until
// the enqueuing transaction ends, concurrent enqueues of one key are serialized. The
// candidate lookup must take its snapshot after the lock, so a dedup enqueue requires
// READ COMMITTED ([ErrIsolation] otherwise). Enqueue cost does not depend on the
// backlog.
//
// # Time
//
// Every instant that decides whether a job is due or a lease has run out is
// PostgreSQL's now(). Workers pass durations, never timestamps, so a worker with a
// wrong clock behaves correctly.
//
// # Testing
//
// Package venturitest runs a handler without a database, asserts that a task was
// enqueued (matching a predicate on the typed payload), and drains a worker's jobs in
// the caller's goroutine.
//
// See the README for the guarantees, every configuration field and its default, and the
// examples for complete programs.
package venturi
