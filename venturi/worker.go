package venturi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Config configures a Worker. Zero fields take the documented defaults; see the README
// for the reasoning behind each.
type Config struct {
	// Concurrency is the number of handlers that run at once. Default 100.
	Concurrency int
	// Lease is how long a claim holds a job without being extended. Running jobs' leases
	// are extended every Lease/3 in one statement per worker; a job whose lease expires
	// is rescued by any worker. Default 30s.
	Lease time.Duration
	// ShutdownGrace is how long Stop lets running handlers finish after signalling them
	// before it cancels their contexts. Default 10s.
	ShutdownGrace time.Duration
	// PollInterval is the longest an idle worker waits before looking for due jobs
	// without having been notified. Default 1s.
	PollInterval time.Duration
	// PollOnly turns off LISTEN/NOTIFY wakeups, for connection poolers in transaction
	// mode. Default false.
	PollOnly bool
	// FetchCooldown is the pause between two fetches while jobs keep arriving; it lets
	// several finished handlers free their slots before the next claim. Default 1ms.
	FetchCooldown time.Duration
	// Prefetch is the most claimed jobs that may wait for a free handler slot. A buffer
	// keeps slots busy while the next claim is in flight; its jobs are leased like running
	// ones, released to other workers when they wait more than a second (or Lease/3) and
	// at once by Stop. A job that arrives with a higher priority than the buffered ones
	// waits behind them.
	//
	// The buffer adapts between min(Concurrency, Prefetch) and Prefetch: it doubles when
	// a full claim arrives to find every buffered job started and slots free (handlers are
	// faster than claims), and halves when a buffered job waited more than four claim
	// round trips (handlers are the bottleneck; other workers may take the jobs).
	// Default: max(Concurrency, 1000); negative disables.
	Prefetch int
	// ClaimBatch is the most jobs one claim takes. Default: Concurrency + Prefetch, at
	// most 1000.
	ClaimBatch int
	// Backoff is the default retry backoff; a task's BackoffPolicy overrides it.
	// Default DefaultBackoff (1s base, 1h cap).
	Backoff Backoff
	// JitterFraction f places each retry delay d in [d*(1-f), d]. Default 0.25; a
	// negative value disables jitter.
	JitterFraction float64
	// MaxFailures is the backstop: a job whose failed runs reach it goes to dead. Pauses
	// never count. Default 25; a negative value disables the backstop.
	MaxFailures int
	// JobTimeout bounds one run; a run that exceeds it fails and retries. It is checked
	// at every lease tick (Lease/3), so a run is cancelled within Lease/3 after its
	// timeout. Default 30m; a negative value disables it.
	JobTimeout time.Duration
	// RetainCompleted is how long completed jobs are kept before pruning. Default 24h.
	RetainCompleted time.Duration
	// RetainDead is how long dead jobs are kept before pruning. Default 7 days.
	RetainDead time.Duration
	// MaintenanceInterval is how often the worker tries to become the maintainer
	// (rescue of expired leases, promotion of scheduled jobs, pruning). Only one worker
	// per schema does maintenance at a time. Default 1s.
	MaintenanceInterval time.Duration
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// ID names the worker in leases and journals. Default: host-pid-random.
	ID string
}

// validate applies the defaults to zero fields and checks the rest.
func (c Config) validate() (Config, error) {
	return c.withDefaults(), nil
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 100
	}
	switch {
	case c.Prefetch == 0:
		c.Prefetch = max(c.Concurrency, 1000)
	case c.Prefetch < 0:
		c.Prefetch = 0
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = min(c.Concurrency+c.Prefetch, 1000)
	}
	c.ClaimBatch = min(c.ClaimBatch, c.Concurrency+c.Prefetch)
	def(&c.Lease, 30*time.Second)
	def(&c.ShutdownGrace, 10*time.Second)
	def(&c.PollInterval, time.Second)
	def(&c.FetchCooldown, time.Millisecond)
	def(&c.JobTimeout, 30*time.Minute)
	def(&c.RetainCompleted, 24*time.Hour)
	def(&c.RetainDead, 7*24*time.Hour)
	def(&c.MaintenanceInterval, time.Second)
	c.Backoff = c.Backoff.merged(DefaultBackoff)
	if c.JitterFraction == 0 {
		c.JitterFraction = 0.25
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = 25
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	return c
}

// Worker runs the handlers registered on it against state S. It claims only the kinds it
// registered, so worker binaries with different registries can share one database.
type Worker[S any] struct {
	pool  *pgxpool.Pool
	state S
	cfg   Config
	log   *slog.Logger
	q     *dbsqlc.Queries
	reg   map[string]*registration[S]
	kinds []string

	ctl       *pgxpool.Pool // the worker's own connections: claims, finishes, leases, maintenance
	channel   string
	slots     chan struct{}
	freed     chan struct{} // a slot was freed
	starts    chan start    // claimed jobs for the handler goroutines
	wake      chan struct{} // a notification or a reconnect asks for a fetch
	shutdown  chan struct{} // closed when graceful shutdown begins
	hardCtx   context.Context
	hard      context.CancelCauseFunc
	stopBg    context.CancelFunc
	fetchStop context.CancelFunc
	handlers  sync.WaitGroup
	bg        sync.WaitGroup
	fetchWG   sync.WaitGroup
	fin       *finisher

	mu       sync.Mutex
	active   map[ulid.ULID]*activeRun
	started  bool
	stopped  bool
	lastWake time.Time
}

type registration[S any] struct {
	kind string
	run  func(ctx context.Context, w *Worker[S], j *claimed) *finishReq
}

// claimed is a job as a claim returned it.
type claimed struct {
	id       ulid.ULID
	kind     string
	payload  []byte
	carry    []byte
	runs     int
	failures int
	token    int64
	journal  []byte
	started  time.Time // attempted_at: the claim's database time
	sent     time.Time // local clock when the claim was sent, for measuring the run
}

// activeRun is a claimed job whose result is not yet durable.
type activeRun struct {
	job      *claimed
	cancel   context.CancelCauseFunc
	deadline time.Time // local monotonic estimate of the lease's expiry
	finished bool      // the handler returned; its result is being written
	started  time.Time // local clock when the handler started, for JobTimeout
}

var (
	errShutdown   = errors.New("venturi: worker shut down")
	errJobTimeout = errors.New("venturi: job timeout")
)

// NewWorker returns a worker on pool with shared state passed to every handler. It
// returns an error, and no worker, when cfg has an invalid field. Register task types
// with [Register] before calling Start.
func NewWorker[S any](pool *pgxpool.Pool, state S, cfg Config) (*Worker[S], error) {
	if pool == nil {
		return nil, errors.New("venturi: NewWorker with a nil pool")
	}
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Worker[S]{
		pool:    pool,
		state:   state,
		cfg:     cfg,
		log:     cfg.Logger.With("venturi_worker", cfg.ID),
		q:       dbsqlc.New(),
		reg:     map[string]*registration[S]{},
		channel: notifyChannel(pool),
		active:  map[ulid.ULID]*activeRun{},
	}, nil
}

// ID returns the worker's ID as recorded in leases and journals.
func (w *Worker[S]) ID() string { return w.cfg.ID }

// Register adds task type T to w. S and C are inferred from T's Handle method, so the
// call is Register[FetchBookmark](w). It returns an error if the kind is empty or already
// registered, if w has started, or if T's merge method uses another carry type than its
// handler.
func Register[T Handler[S, C], S, C any](w *Worker[S]) error {
	return register(w, func(ctx context.Context, task T, run *Run[C], state S) (Outcome, error) {
		return task.Handle(ctx, run, state)
	})
}

// HandlerFunc runs a task of type T against the worker's state S with carry C.
type HandlerFunc[T Task, S, C any] func(ctx context.Context, task T, run *Run[C], state S) (Outcome, error)

// MustRegister is like [Register] but panics on error, for registrations in main that
// cannot fail at run time.
func MustRegister[T Handler[S, C], S, C any](w *Worker[S]) {
	if err := Register[T](w); err != nil {
		panic(err)
	}
}

// RegisterFunc adds task type T to w with handle as its handler. It is for task types
// defined in another package (a shared producer module), to which the worker cannot add
// a Handle method: T, S and C are inferred from handle, and T keeps its own Kind,
// DedupKey and Merge. It returns the errors of [Register], and one for a nil handle.
func RegisterFunc[T Task, S, C any](w *Worker[S], handle HandlerFunc[T, S, C]) error {
	if handle == nil {
		return errors.New("venturi: RegisterFunc with a nil handler")
	}
	return register(w, handle)
}

// MustRegisterFunc is like [RegisterFunc] but panics on error.
func MustRegisterFunc[T Task, S, C any](w *Worker[S], handle HandlerFunc[T, S, C]) {
	if err := RegisterFunc(w, handle); err != nil {
		panic(err)
	}
}

// kindOf calls Kind on T's zero value, or on a new value when T is a pointer type.
func kindOf[T Task]() string {
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		return reflect.New(t.Elem()).Interface().(Task).Kind()
	}
	var zero T
	return zero.Kind()
}

func register[T Task, S, C any](w *Worker[S], handle HandlerFunc[T, S, C]) error {
	var zero T
	kind := kindOf[T]()
	if kind == "" {
		return fmt.Errorf("venturi: register %T: %w", zero, ErrEmptyKind)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("venturi: register after Start")
	}
	if _, dup := w.reg[kind]; dup {
		return fmt.Errorf("venturi: kind %q registered twice", kind)
	}
	m, err := mergerFor(reflect.TypeFor[T]())
	if err != nil {
		return err
	}
	if m.carryType != nil && m.carryType != reflect.TypeFor[C]() {
		return fmt.Errorf("venturi: %T.Merge sees carry %v but its handler's carry is %v", zero, m.carryType, reflect.TypeFor[C]())
	}
	w.reg[kind] = &registration[S]{kind: kind, run: func(ctx context.Context, w *Worker[S], j *claimed) *finishReq {
		return runTask(ctx, w, j, handle)
	}}
	w.kinds = append(w.kinds, kind)
	slices.Sort(w.kinds)
	return nil
}

// finishReq is the end of one run, as the FinishRuns statement takes it.
type finishReq struct {
	job       *claimed
	state     dbsqlc.VenturiJobState
	delay     time.Duration
	failed    bool
	setCarry  bool
	carry     []byte
	entry     JournalEntry
	ended     time.Time // local clock when the run ended
	finalized bool      // written by Run.CompleteTx in the handler's transaction
	lost      bool      // the lease was lost: write nothing
	degraded  bool      // a first write was refused; retried without carry and attachment
}

func runTask[T Task, S, C any](ctx context.Context, w *Worker[S], j *claimed, handle HandlerFunc[T, S, C]) *finishReq {
	var task T
	if err := json.Unmarshal(j.payload, &task); err != nil {
		return w.deadReq(j, fmt.Sprintf("decode payload into %s: %v", reflect.TypeFor[T](), err))
	}
	var carry C
	if len(j.carry) > 0 {
		if err := json.Unmarshal(j.carry, &carry); err != nil {
			return w.deadReq(j, fmt.Sprintf("decode carry into %s: %v", reflect.TypeFor[C](), err))
		}
	}
	var history []JournalEntry
	if string(j.journal) != "[]" { // a first run's journal is empty: skip the decoder
		if err := json.Unmarshal(j.journal, &history); err != nil {
			return w.deadReq(j, fmt.Sprintf("decode journal: %v", err))
		}
	}
	backoff := w.cfg.Backoff
	if bp, ok := any(task).(BackoffPolicy); ok {
		backoff = bp.Backoff().merged(w.cfg.Backoff)
	}
	run := &Run[C]{
		id: j.id, kind: j.kind, token: j.token, runs: j.runs, failures: j.failures,
		history: history, carry: carry, shutdown: w.shutdown,
	}
	keepCarry := reflect.TypeFor[C]().Size() > 0
	// build turns a result into the job's next state. The carry is stored only when the
	// job goes back to pending (pause, retry, interruption): a completed or dead job has
	// no next run. It reports a carry that cannot be stored.
	build := func(o Outcome, err error, c *C, attachment json.RawMessage) (*finishReq, error) {
		req := w.outcomeReq(ctx, j, o, err, attachment, backoff)
		if !keepCarry || c == nil || (req.state != dbsqlc.VenturiJobStateAvailable && req.state != dbsqlc.VenturiJobStateScheduled) {
			return req, nil
		}
		cb, cerr := encodeJSON(c)
		if cerr != nil {
			return req, fmt.Errorf("encode carry: %w", cerr)
		}
		req.carry, req.setCarry = cb, true
		return req, nil
	}
	run.finish = func(fctx context.Context, tx pgx.Tx, o Outcome, c *C, attachment json.RawMessage) error {
		req, err := build(o, nil, c, attachment)
		if err != nil {
			return fmt.Errorf("venturi: %w", err)
		}
		ids, err := w.q.FinishRuns(fctx, tx, finishParams(w.cfg.ID, []*finishReq{req}))
		if err != nil {
			return err
		}
		if len(ids) != 1 {
			return ErrLeaseLost
		}
		return nil
	}
	o, err := safeHandle(ctx, handle, task, run, w.state)
	if err == nil && run.finalized {
		return &finishReq{job: j, finalized: true}
	}
	req, cerr := build(o, err, &run.carry, run.attachment)
	if cerr != nil {
		// The carry cannot be stored: the run fails (retryably) and keeps the last stored
		// carry, so the next run resumes from the previous checkpoint.
		req, _ = build(Outcome{}, cerr, nil, run.attachment)
	}
	return req
}

func safeHandle[T Task, S, C any](ctx context.Context, handle HandlerFunc[T, S, C], task T, run *Run[C], state S) (o Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := debug.Stack()
			if len(stack) > 8<<10 {
				stack = stack[:8<<10]
			}
			err = fmt.Errorf("panic: %v\n%s", r, stack)
		}
	}()
	return handle(ctx, task, run, state)
}

func (w *Worker[S]) deadReq(j *claimed, note string) *finishReq {
	return &finishReq{job: j, state: dbsqlc.VenturiJobStateDead, failed: true, ended: time.Now(),
		entry: JournalEntry{Event: EventDead, Note: cleanNote(note)}}
}

// outcomeReq turns a handler's result into the job's next state.
func (w *Worker[S]) outcomeReq(ctx context.Context, j *claimed, o Outcome, err error, attachment json.RawMessage, backoff Backoff) *finishReq {
	req := &finishReq{job: j}
	e := JournalEntry{Attachment: attachment}
	switch {
	case err == nil && o.kind == outcomePause:
		e.Event, e.Note, e.ResumeIn = EventPaused, o.note, o.resumeIn
		req.state, req.delay = pendingState(o.resumeIn), o.resumeIn
	case err == nil:
		e.Event, e.Note = EventCompleted, o.note
		req.state = dbsqlc.VenturiJobStateCompleted
	case context.Cause(ctx) == errShutdown:
		e.Event, e.Note = EventInterrupted, "interrupted by shutdown: "+err.Error()
		req.state = dbsqlc.VenturiJobStateAvailable
	case context.Cause(ctx) == ErrLeaseLost:
		req.lost = true
	default:
		if context.Cause(ctx) == errJobTimeout {
			err = fmt.Errorf("%w after %v: %w", errJobTimeout, w.cfg.JobTimeout, err)
		}
		failures := j.failures + 1
		req.failed = true
		e.Note = err.Error()
		switch {
		case IsPermanent(err):
			e.Event = EventDead
			req.state = dbsqlc.VenturiJobStateDead
		case w.cfg.MaxFailures > 0 && failures >= w.cfg.MaxFailures:
			e.Event = EventDead
			e.Note = fmt.Sprintf("backstop reached after %d failures: %s", failures, e.Note)
			req.state = dbsqlc.VenturiJobStateDead
		default:
			d, explicit := retryDelay(err)
			if !explicit {
				d = Jitter(backoff.Delay(failures), w.cfg.JitterFraction, j.id, failures)
			}
			e.Event, e.ResumeIn = EventFailed, d
			req.state, req.delay = pendingState(d), d
		}
	}
	e.Note = cleanNote(e.Note)
	req.entry, req.ended = e, time.Now()
	return req
}

// maxNoteBytes bounds a journal note; error messages can be arbitrarily long.
const maxNoteBytes = 16 << 10

// cleanNote makes a note storable in jsonb: no NUL characters, valid UTF-8, bounded.
func cleanNote(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) > maxNoteBytes {
		s = strings.ToValidUTF8(s[:maxNoteBytes], "") + " …(truncated)"
	}
	return s
}

func pendingState(delay time.Duration) dbsqlc.VenturiJobState {
	if delay <= 0 {
		return dbsqlc.VenturiJobStateAvailable
	}
	return dbsqlc.VenturiJobStateScheduled
}

// Start connects the worker's control connections and starts claiming. It returns at
// once; call Stop to shut down gracefully.
func (w *Worker[S]) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("venturi: worker already started")
	}
	if len(w.reg) == 0 {
		return errors.New("venturi: no task types registered")
	}
	cc := w.pool.Config()
	// claims, releases of stale prefetches, leases, maintenance, results
	cc.MaxConns, cc.MinConns = 5, 0
	// These connections run a dozen statements: pgx's default caches (512 entries each,
	// allocated up front) would be most of their memory.
	cc.ConnConfig.StatementCacheCapacity, cc.ConnConfig.DescriptionCacheCapacity = 32, 32
	ctl, err := pgxpool.NewWithConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("venturi: control pool: %w", err)
	}
	if err := ctl.Ping(ctx); err != nil {
		ctl.Close()
		return fmt.Errorf("venturi: connect: %w", err)
	}
	w.ctl = ctl
	w.started = true
	w.slots = make(chan struct{}, w.cfg.Concurrency)
	w.starts = make(chan start, w.cfg.Concurrency)
	for range w.cfg.Concurrency {
		go w.handlerLoop()
	}
	w.freed = make(chan struct{}, 1)
	w.wake = make(chan struct{}, 1)
	w.shutdown = make(chan struct{})
	w.hardCtx, w.hard = context.WithCancelCause(context.WithoutCancel(ctx))
	bgCtx, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	w.stopBg = stopBg
	w.fin = newFinisher(w)
	fetchCtx, stopFetch := context.WithCancel(bgCtx)
	w.fetchStop = stopFetch
	w.fetchWG.Add(1)
	go func() { defer w.fetchWG.Done(); w.fetchLoop(fetchCtx) }()
	w.fin.start(bgCtx)
	w.goBg(func() { w.leaseLoop(bgCtx) })
	w.goBg(func() { w.maintenanceLoop(bgCtx) })
	if !w.cfg.PollOnly {
		w.goBg(func() { w.listenLoop(bgCtx) })
	}
	w.log.Info("venturi worker started", "kinds", w.kinds, "concurrency", w.cfg.Concurrency)
	return nil
}

func (w *Worker[S]) goBg(f func()) {
	w.bg.Add(1)
	go func() { defer w.bg.Done(); f() }()
}

// Stop shuts the worker down gracefully: it stops claiming, releases claimed jobs that
// have not started, signals running handlers (Run.Shutdown), waits up to ShutdownGrace,
// then cancels their contexts. A run cut this way returns to pending with an interrupted
// journal entry and does not count as a failure. Stop returns when every result is
// written, or when ctx ends.
func (w *Worker[S]) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started || w.stopped {
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	w.mu.Unlock()

	w.fetchStop()
	w.fetchWG.Wait() // no handler starts after this
	close(w.starts)  // the handler goroutines exit once their runs return
	close(w.shutdown)
	done := make(chan struct{})
	go func() { w.handlers.Wait(); close(done) }()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
	case <-ctx.Done():
	}
	w.hard(errShutdown)
	select {
	case <-done:
	case <-time.After(min(5*time.Second, w.cfg.Lease/2)):
		// Handlers that ignore cancellation: release their jobs now; their late writes
		// fail the fencing token.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		w.releaseStuck(rctx)
		cancel()
	}
	w.fin.close()
	w.stopBg()
	w.bg.Wait()
	w.ctl.Close()
	w.log.Info("venturi worker stopped")
	return ctx.Err()
}

// Run starts the worker, blocks until ctx is done, then stops it gracefully.
func (w *Worker[S]) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return w.Stop(context.Background())
}

func (w *Worker[S]) releaseStuck(ctx context.Context) {
	w.mu.Lock()
	var reqs []*finishReq
	for _, a := range w.active {
		if a.cancel == nil || a.finished {
			continue // not started (the fetch loop released it), or its result is being written
		}
		reqs = append(reqs, &finishReq{job: a.job, state: dbsqlc.VenturiJobStateAvailable, ended: time.Now(),
			entry: JournalEntry{Event: EventInterrupted, Note: "interrupted by shutdown: handler did not return after cancellation"}})
	}
	w.mu.Unlock()
	if len(reqs) == 0 {
		return
	}
	slices.SortFunc(reqs, func(a, b *finishReq) int { return a.job.id.Compare(b.job.id) }) // lock order
	if _, err := w.q.FinishRuns(ctx, w.ctl, finishParams(w.cfg.ID, reqs)); err != nil {
		w.log.Warn("venturi: release of stuck runs failed; their leases will expire", "err", err)
	}
	for _, r := range reqs {
		w.untrack(r.job)
	}
}

// claimResult is what a claim returned.
type claimResult struct {
	jobs []*claimed
	err  error
}

// fetchLoop claims jobs while there is room and starts their handlers. One claim is in
// flight at a time (two in parallel measured slower: they contend for the same index and
// heap pages); while it is, the loop keeps moving buffered jobs into freed slots.
//
// The room is the free slots plus the prefetch buffer's limit, which adapts to the
// handlers (see Config.Prefetch): fast handlers get large claims, whose per-row cost on
// the server is far lower than that of many small ones, and slow handlers do not hoard
// jobs that other workers could run.
func (w *Worker[S]) fetchLoop(ctx context.Context) {
	var (
		buffer    []*claimed // claimed, not started: at most prefetch beyond the free slots
		base      = min(w.cfg.Concurrency, w.cfg.Prefetch)
		prefetch  = base        // the buffer's current limit, in [base, Prefetch]
		rtt       time.Duration // how long the last claim took
		shrink    bool          // prefetch may shrink (once per claim)
		fed       int           // jobs started since the last claim returned
		claiming  bool          // a claim is in flight (one at a time)
		lastFetch time.Time     // when it (or the last one) was sent
		asked     int           // how many jobs it asked for
		askWakes  uint64        // wakes when it was sent
		idle      bool          // the last claim found nothing: wait for a wake-up or the poll
		pollAt    time.Time     // when an idle loop looks again without a wake-up
		wakes     uint64        // wake-ups received
		notBefore time.Time     // after a failed claim, no new one before this
		errDelay  = 50 * time.Millisecond
	)
	timer := time.NewTimer(time.Hour) // Go 1.23 timers: Stop and Reset leave no stale tick
	timer.Stop()
	done := make(chan claimResult, 1)
	defer func() {
		if claiming {
			buffer = append(buffer, (<-done).jobs...)
		}
		w.release(buffer)
	}()
	for ctx.Err() == nil {
		for len(buffer) > 0 && len(w.slots) < cap(w.slots) {
			if shrink && time.Since(buffer[0].sent) > max(4*rtt, 10*time.Millisecond) {
				prefetch, shrink = max(prefetch/2, base), false // handlers are the bottleneck
			}
			w.slots <- struct{}{}
			w.startHandler(buffer[0])
			buffer[0] = nil // the backing array outlives the slice: do not keep the job alive
			buffer = buffer[1:]
			fed++
		}
		buffer = w.releaseStale(buffer)
		room := cap(w.slots) - len(w.slots) + prefetch - len(buffer)
		next := time.Duration(-1) // when to look again without an event; -1: never
		after := func(d time.Duration) {
			if next < 0 || d < next {
				next = max(d, 0)
			}
		}
		// While the buffer still holds more than the claim could add, a claim can wait:
		// this keeps claims large instead of one round trip per freed slot.
		if !claiming && !idle && room > 0 && len(buffer) < room {
			wait := max(w.cfg.FetchCooldown-time.Since(lastFetch), time.Until(notBefore))
			if wait <= 0 {
				asked, askWakes = min(room, w.cfg.ClaimBatch), wakes
				lastFetch, claiming = time.Now(), true
				go func(n int) {
					jobs, err := w.claim(ctx, n)
					done <- claimResult{jobs: jobs, err: err}
				}(asked)
				continue
			}
			after(wait)
		}
		if len(buffer) > 0 {
			after(w.prefetchWait() - time.Since(buffer[0].sent)) // release stale prefetches
		}
		polling := idle && !claiming && len(buffer) == 0
		if polling {
			// Nothing due. Right after a notification, keep looking briefly: producers
			// debounce their NOTIFYs, so a job committed just after the last one may have
			// sent none.
			w.mu.Lock()
			recent := time.Since(w.lastWake) < 20*time.Millisecond
			w.mu.Unlock()
			if recent {
				idle = false
				continue
			}
			after(time.Until(pollAt)) // a deadline, not an interval: freed slots must not defer it
		}
		var tick <-chan time.Time
		if next >= 0 {
			timer.Reset(next)
			tick = timer.C
		}
		select {
		case r := <-done:
			claiming = false
			if r.err != nil {
				if ctx.Err() == nil {
					w.log.Warn("venturi: claim failed", "err", r.err)
					notBefore = time.Now().Add(errDelay)
					errDelay = min(errDelay*2, 5*time.Second)
				}
				break
			}
			errDelay = 50 * time.Millisecond
			rtt, shrink = time.Since(lastFetch), true
			// Handlers ran through everything the last claim brought and waited for this one,
			// which found more than it had room for: claim more at a time.
			if len(r.jobs) == asked && fed > 0 && len(buffer) == 0 && len(w.slots) < cap(w.slots) {
				prefetch = min(prefetch*2, w.cfg.Prefetch)
			}
			fed = 0
			buffer = append(buffer, r.jobs...)
			// An empty claim means nothing is due, unless a notification came meanwhile.
			idle = len(r.jobs) == 0 && askWakes == wakes
			if idle {
				pollAt = time.Now().Add(w.cfg.PollInterval)
			}
		case <-w.freed:
		case <-tick:
			if polling && !time.Now().Before(pollAt) {
				idle = false // the poll interval passed
			}
		case <-w.wake:
			wakes++
			idle = false
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// prefetchWait is the longest a prefetched job waits for a slot before it is released
// for other workers: busy handlers must not hold claimed jobs hostage.
func (w *Worker[S]) prefetchWait() time.Duration { return min(time.Second, w.cfg.Lease/3) }

// releaseStale returns buffered jobs that waited longer than prefetchWait to the queue.
func (w *Worker[S]) releaseStale(buffer []*claimed) []*claimed {
	n := 0
	for n < len(buffer) && time.Since(buffer[n].sent) > w.prefetchWait() {
		n++
	}
	if n == 0 {
		return buffer
	}
	w.release(buffer[:n])
	clear(buffer[:n]) // the backing array outlives the slice: do not keep the jobs alive
	return buffer[n:]
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// claim promotes scheduled jobs that came due and claims up to n, in one round trip.
func (w *Worker[S]) claim(ctx context.Context, n int) ([]*claimed, error) {
	b := &pgx.Batch{}
	b.Queue(dbsqlc.PromoteDueSQL, int32(1000))
	var jobs []*claimed
	sent := time.Now()
	b.Queue(dbsqlc.ClaimSQL, delayOf(w.cfg.Lease), w.cfg.ID, int32(max(w.cfg.MaxFailures, 0)), w.kinds, int32(n)).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var (
					id    pgtype.UUID
					j     claimed
					runs  int32
					fails int32
					tok   pgtype.Int8
				)
				var started *time.Time
				if err := rows.Scan(&id, &j.kind, &j.payload, &j.carry, &runs, &fails, &tok, &j.journal, &started); err != nil {
					return err
				}
				j.id, j.runs, j.failures, j.token, j.sent = ulidOf(id), int(runs), int(fails), tok.Int64, sent
				if started != nil {
					j.started = *started
				}
				jobs = append(jobs, &j)
			}
			return rows.Err()
		})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease/2)
	defer cancel()
	if err := w.ctl.SendBatch(cctx, b).Close(); err != nil {
		return nil, err
	}
	w.mu.Lock()
	for _, j := range jobs {
		if old := w.active[j.id]; old != nil && old.cancel != nil {
			old.cancel(ErrLeaseLost) // an earlier run of this job lost its lease
		}
		w.active[j.id] = &activeRun{job: j, deadline: sent.Add(w.cfg.Lease)}
	}
	w.mu.Unlock()
	return jobs, nil
}

// release returns claimed jobs that never started, without recording a run.
func (w *Worker[S]) release(jobs []*claimed) {
	if len(jobs) == 0 {
		return
	}
	var p dbsqlc.ReleaseUnstartedParams
	w.mu.Lock()
	for _, j := range jobs {
		p.Ids = append(p.Ids, uuidOf(j.id))
		p.Tokens = append(p.Tokens, j.token)
	}
	w.mu.Unlock()
	for _, j := range jobs {
		w.untrack(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.q.ReleaseUnstarted(ctx, w.ctl, p); err != nil {
		w.log.Warn("venturi: release of unstarted jobs failed; their leases will expire", "err", err)
	}
}

func (w *Worker[S]) startHandler(j *claimed) {
	ctx, cancel := context.WithCancelCause(w.hardCtx)
	w.mu.Lock()
	a := w.active[j.id]
	now := time.Now()
	lost := a == nil || a.job != j || now.After(a.deadline)
	if !lost {
		a.cancel, a.started = cancel, now
	}
	w.mu.Unlock()
	if lost {
		// Its lease ran out while it waited in the prefetch buffer: the job is (or will
		// be) rescued, so do not start a run whose writes would be discarded.
		cancel(ErrLeaseLost)
		w.untrack(j)
		<-w.slots
		return
	}
	w.handlers.Add(1)
	w.starts <- start{job: j, ctx: ctx, cancel: cancel}
}

// start hands a claimed job to a handler goroutine.
type start struct {
	job    *claimed
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// handlerLoop is one of Concurrency long-lived handler goroutines. Reusing goroutines
// keeps their grown stacks: a goroutine per job would grow a fresh stack every time.
func (w *Worker[S]) handlerLoop() {
	for s := range w.starts {
		w.runHandler(s.job, s.ctx, s.cancel)
	}
}

func (w *Worker[S]) runHandler(j *claimed, ctx context.Context, cancel context.CancelCauseFunc) {
	defer w.handlers.Done()
	defer func() {
		<-w.slots
		select {
		case w.freed <- struct{}{}:
		default:
		}
	}()
	req := w.reg[j.kind].run(ctx, w, j)
	cancel(nil)
	w.mu.Lock()
	if a := w.active[j.id]; a != nil && a.job == j {
		a.finished = true
	}
	w.mu.Unlock()
	if req.finalized || req.lost {
		w.untrack(j)
		return
	}
	w.fin.submit(req)
}

func (w *Worker[S]) untrack(j *claimed) {
	w.mu.Lock()
	if a := w.active[j.id]; a != nil && a.job == j {
		delete(w.active, j.id)
	}
	w.mu.Unlock()
}

// leaseLoop extends the leases of every running job of this worker in one statement per
// tick, and cancels the handlers whose lease is lost or about to expire unextended.
func (w *Worker[S]) leaseLoop(ctx context.Context) {
	every := w.cfg.Lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		var p dbsqlc.ExtendLeasesParams
		runs := make([]*claimed, 0, len(w.active))
		for _, a := range w.active {
			runs = append(runs, a.job)
		}
		w.mu.Unlock()
		if len(runs) == 0 {
			continue
		}
		slices.SortFunc(runs, func(a, b *claimed) int { return a.id.Compare(b.id) }) // lock rows in ID order
		for _, j := range runs {
			p.Ids = append(p.Ids, uuidOf(j.id))
			p.Tokens = append(p.Tokens, j.token)
		}
		p.LeaseUs = delayOf(w.cfg.Lease)
		sent := time.Now()
		// The statement may take up to half a lease (a loaded server, a pool wait); a
		// later tick or the self-fencing below covers what it could not extend.
		cctx, cancel := context.WithTimeout(ctx, w.cfg.Lease/2)
		kept, err := w.q.ExtendLeases(cctx, w.ctl, p)
		cancel()
		now := time.Now()
		w.mu.Lock()
		if err != nil {
			w.log.Warn("venturi: lease extension failed", "err", err, "runs", len(runs))
		} else {
			ok := make(map[ulid.ULID]bool, len(kept))
			for _, u := range kept {
				ok[ulidOf(u)] = true
			}
			for _, j := range runs {
				a := w.active[j.id]
				if a == nil || a.job != j {
					continue // the run ended meanwhile, and the job may run again under a new token
				}
				switch {
				case ok[j.id]:
					a.deadline = sent.Add(w.cfg.Lease)
				case a.cancel == nil:
					a.deadline = time.Time{} // buffered, not started: it will not start
				case a.finished:
					// Its result was written while the statement ran; the finisher untracks it.
				case a.cancel != nil:
					w.log.Warn("venturi: lease lost; cancelling run", "job", j.id, "kind", j.kind)
					a.cancel(ErrLeaseLost)
				}
			}
		}
		for _, a := range w.active {
			switch {
			case a.cancel == nil || a.finished:
			case now.Add(every / 2).After(a.deadline):
				// Self-fencing: a run whose lease could not be extended stops before it expires.
				a.cancel(ErrLeaseLost)
			case w.cfg.JobTimeout > 0 && now.Sub(a.started) > w.cfg.JobTimeout:
				// Checked here rather than with a timer per run: one tick serves every run.
				a.cancel(errJobTimeout)
			}
		}
		w.mu.Unlock()
	}
}

// maintenanceLoop rescues expired leases and prunes old jobs, on one worker at a time.
func (w *Worker[S]) maintenanceLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.MaintenanceInterval)
	defer t.Stop()
	var lastPrune time.Time
	healthySince := time.Time{} // zero: healthy since start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		prune := time.Since(lastPrune) > 30*time.Second
		held, err := w.maintain(ctx, healthySince.IsZero() || time.Since(healthySince) >= w.cfg.Lease, prune)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("venturi: maintenance failed", "err", err)
			}
			healthySince = time.Now() // after an outage, give live workers a lease to extend
			continue
		}
		if prune && held {
			lastPrune = time.Now()
		}
	}
}

func (w *Worker[S]) maintain(ctx context.Context, rescue, prune bool) (held bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pokeAfter := false
	defer func() {
		if err == nil && pokeAfter {
			w.poke() // rescued jobs are claimable once the transaction has committed
		}
	}()
	err = pgx.BeginFunc(ctx, w.ctl, func(tx pgx.Tx) error {
		locked, err := w.q.TryMaintenanceLock(ctx, tx)
		if err != nil || !locked {
			return err
		}
		held = true
		if rescue {
			rescued, err := w.q.RescueExpired(ctx, tx, dbsqlc.RescueExpiredParams{
				Max: 1000, MinUptimeUs: delayOf(w.cfg.Lease)})
			if err != nil {
				return err
			}
			for _, r := range rescued {
				w.log.Warn("venturi: rescued a run whose lease expired", "job", ulidOf(r.ID), "kind", r.Kind, "state", r.State)
			}
			pokeAfter = len(rescued) > 0
		}
		if _, err := w.q.PromoteDue(ctx, tx, 1000); err != nil {
			return err
		}
		if prune {
			for state, age := range map[dbsqlc.VenturiJobState]time.Duration{
				dbsqlc.VenturiJobStateCompleted: w.cfg.RetainCompleted,
				dbsqlc.VenturiJobStateDead:      w.cfg.RetainDead,
			} {
				if _, err := w.q.PruneFinished(ctx, tx, dbsqlc.PruneFinishedParams{
					State: state, AgeUs: delayOf(age), Max: 10000}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return held, err
}

// poke asks the fetch loop to look for jobs now.
func (w *Worker[S]) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// listenLoop holds a dedicated LISTEN connection and wakes the fetch loop on
// notifications for this worker's kinds. The connection is checked every 10s; a dead one
// is replaced, and a fetch follows every reconnect to pick up what the gap missed.
func (w *Worker[S]) listenLoop(ctx context.Context) {
	delay := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("venturi: listener lost its connection; polling continues", "err", err)
		sleepCtx(ctx, delay)
		delay = min(delay*2, 5*time.Second)
	}
}

func (w *Worker[S]) listen(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, w.pool.Config().ConnConfig)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{w.channel}.Sanitize()); err != nil {
		return err
	}
	mine := make(map[string]bool, len(w.kinds))
	for _, k := range w.kinds {
		mine[k] = true
	}
	w.poke()
	for {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			// Quiet for 10s: make sure the connection is still alive.
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := conn.Exec(hctx, "SELECT 1")
			cancel()
			if err != nil {
				return fmt.Errorf("listener heartbeat: %w", err)
			}
			continue
		}
		if mine[n.Payload] {
			w.mu.Lock()
			w.lastWake = time.Now()
			w.mu.Unlock()
			w.poke()
		}
	}
}
