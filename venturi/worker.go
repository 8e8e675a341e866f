package venturi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi/internal/completer"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/executor"
	"github.com/venturi-dev/venturi/internal/fetcher"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/journalenc"
	"github.com/venturi-dev/venturi/internal/workflowresolve"
)

// Worker runs the handlers registered on it against state S. It claims only the kinds it
// registered, so worker binaries with different registries can share one database.
//
// A started worker is a handful of services around one set of claimed jobs (the run tracker):
// the fetcher claims jobs and feeds them to the executor, which runs handlers and hands
// their results to the completer, which writes them in batches; the lease extender keeps
// the claims alive, the maintainer rescues, promotes and prunes, and the listener turns
// notifications into fetches.
type Worker[S any] struct {
	pool    *pgxpool.Pool
	state   S
	cfg     Config
	log     *slog.Logger
	q       *dbsqlc.Queries
	reg     map[string]*registration
	kinds   []string
	channel string

	mu       sync.Mutex // guards the registry and the lifecycle below
	started  bool
	stopping bool
	stopped  chan struct{} // closed when shutdown has finished

	// Built by Start.
	ctl       *pgxpool.Pool // the worker's own connections: claims, results, leases, maintenance
	tracker   *jobrun.Tracker
	execs     []*executor.Executor // one per queue served, in Config.Queues order
	fetchers  []*fetcher.Fetcher   // the same
	fin       *completer.Completer
	dbCtx     context.Context // every statement's parent; cancelled when Stop gives up
	abortDB   context.CancelFunc
	stopFetch context.CancelFunc
	fetchDone chan struct{} // closed when every fetcher has returned
	stopBg    context.CancelFunc
	bg        sync.WaitGroup

	hub eventHub // in-process lifecycle events (Subscribe)
}

// controlConns is the size of the worker's own pool: a claim, a result batch, a release
// of stale prefetches, a lease extension and a maintenance transaction can be in flight
// at once. The listener holds one more connection of its own.
const controlConns = 5

// NewWorker returns a worker on pool with shared state passed to every handler. It
// returns an error, and no worker, when a field of cfg is invalid (see [ConfigError]).
// Register task types with [Register] before calling Start.
func NewWorker[S any](pool *pgxpool.Pool, state S, cfg Config) (*Worker[S], error) {
	if pool == nil {
		return nil, errors.New("venturi: NewWorker with a nil pool")
	}
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	w := &Worker[S]{
		pool:    pool,
		state:   state,
		cfg:     cfg,
		log:     cfg.Logger.With("venturi_worker", cfg.ID),
		q:       dbsqlc.New(),
		reg:     map[string]*registration{},
		channel: notifyChannel(pool),
		stopped: make(chan struct{}),
	}
	w.hub.log = w.log
	return w, nil
}

// ID returns the worker's ID as recorded in leases and journals.
func (w *Worker[S]) ID() string { return w.cfg.ID }

// Start connects the worker's control connections and starts claiming. It returns at
// once; call Stop to shut down. A worker starts once.
func (w *Worker[S]) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.started:
		return errors.New("venturi: worker already started")
	case len(w.reg) == 0:
		return errors.New("venturi: no task types registered")
	}
	ctl, err := w.connect(ctx)
	if err != nil {
		return err
	}
	w.ctl, w.started = ctl, true
	base := context.WithoutCancel(ctx)
	w.dbCtx, w.abortDB = context.WithCancel(base)
	if err := w.recordLimits(ctx); err != nil {
		ctl.Close()
		w.ctl, w.started = nil, false
		return err
	}
	if err := ensureHistory(ctx, w.cfg, w.log, ctl, w.q); err != nil {
		ctl.Close()
		w.ctl, w.started = nil, false
		return err
	}
	if err := w.ensureSingletons(ctx); err != nil {
		ctl.Close()
		w.ctl, w.started = nil, false
		return err
	}
	w.tracker = newTracker(w.cfg, w.log)
	w.fin = newCompleter(w.cfg, ctl, w.q, w.tracker, w.pokeAll, w.channel, &w.hub, w.log)
	queues := make(map[string]*fetcher.Fetcher, len(w.cfg.Queues))
	for _, wq := range w.cfg.Queues {
		qcfg := w.cfg.forQueue(wq)
		e := newExecutor(base, qcfg, w.pool, w.q, w.reg, w.tracker, w.fin.Submit, w.channel, &w.hub)
		f := newFetcher(qcfg, ctl, w.kinds, e, w.tracker, w.dbCtx, w.channel, w.log)
		w.execs, w.fetchers = append(w.execs, e), append(w.fetchers, f)
		queues[wq.Name] = f
	}

	var fetchCtx, bgCtx context.Context
	fetchCtx, w.stopFetch = context.WithCancel(w.dbCtx)
	bgCtx, w.stopBg = context.WithCancel(w.dbCtx)
	w.fetchDone = make(chan struct{})
	var fetching sync.WaitGroup
	for _, f := range w.fetchers {
		fetching.Add(1)
		go func() { defer fetching.Done(); f.Run(fetchCtx) }()
	}
	go func() { fetching.Wait(); close(w.fetchDone) }()
	go w.fin.Run(w.dbCtx)
	leases := newLeaseExtender(w.cfg, w.log, ctl, w.tracker)
	maint := newMaintainer(w.cfg, w.log, ctl, w.q, w.pokeAll)
	w.goBg(func() { leases.Run(bgCtx) })
	w.goBg(func() { maint.run(bgCtx) })
	wfChannel, err := w.q.WorkflowChannel(ctx, ctl)
	if err != nil {
		w.log.Warn("venturi: the workflow channel (workflows settle on the resolver's timer only)", "err", err)
	}
	mergeCh, err := w.q.MergeChannel(ctx, ctl)
	if err != nil {
		w.log.Warn("venturi: the merge channel (enqueues from SQL wait for the next pass to be merged)", "err", err)
	}
	merges := w.deferredMerges(ctl)
	w.goBg(func() { merges.Run(bgCtx) })
	wakeCh := notifyChannelOf(w.cfg.PollOnly, w.channel)
	resolver := workflowresolve.New(ctl, w.q, wakeCh, w.cfg.MaintenanceInterval, w.log, func(ctx context.Context) (int, error) {
		return stopCancelledMembers(ctx, ctl, w.q, wakeCh, idleTxBound(w.cfg.Lease))
	})
	w.goBg(func() { resolver.Run(bgCtx) })
	if !w.cfg.PollOnly {
		also := map[string]func(){}
		if wfChannel != "" {
			also[wfChannel] = resolver.Wake
		}
		if mergeCh != "" {
			also[mergeCh] = merges.Wake
		}
		l := newListener(w.pool.Config().ConnConfig, w.channel, w.kinds, w.log, w.notifyAll, w.pokeAll,
			func(name string) {
				if f := queues[name]; f != nil {
					f.Notified()
				}
			}, w.tracker, also)
		w.goBg(func() { l.Run(bgCtx) })
	}
	w.log.Info("venturi worker started", "queues", w.cfg.Queues, "kinds", w.kinds)
	return nil
}

// ensureSingletons creates the one job of each registered singleton kind that has no live
// job (see Supervised); concurrent workers create exactly one.
func (w *Worker[S]) ensureSingletons(ctx context.Context) error {
	for _, kind := range w.kinds {
		reg := w.reg[kind]
		if reg.singleton == nil {
			continue
		}
		res, err := ensureSingleton(ctx, w.ctl, w.q, reg.zero)
		if err != nil {
			return fmt.Errorf("venturi: ensure singleton %s: %w", kind, err)
		}
		w.log.Info("venturi singleton ensured", "kind", kind, "job_id", res.ID,
			"created", res.Action == ActionInserted, "restart", reg.singleton.Restart.String())
	}
	return nil
}

// deferredMerges returns the service that applies the enqueues from SQL of the worker's
// kinds that wait for a Go merge (merge_deferred.go), through the control pool.
func (w *Worker[S]) deferredMerges(ctl *pgxpool.Pool) *deferredMerges {
	types := make(map[string]reflect.Type, len(w.reg))
	for k, reg := range w.reg {
		types[k] = reg.typ
	}
	return &deferredMerges{q: NewQueue(ctl, QueueConfig{NoNotify: w.cfg.PollOnly}), db: ctl, kinds: w.kinds, types: types,
		interval: w.cfg.MaintenanceInterval, idle: idleTxBound(w.cfg.Lease), log: w.log, wake: make(chan struct{}, 1)}
}

// pokeAll asks every fetcher to look for jobs now.
func (w *Worker[S]) pokeAll() {
	for _, f := range w.fetchers {
		f.Poke()
	}
}

// notifyAll reports a notification for one of the worker's kinds to every fetcher.
func (w *Worker[S]) notifyAll() {
	for _, f := range w.fetchers {
		f.Notified()
	}
}

// recordLimits writes the registered kinds' limits to the database, where every worker's
// claim reads them, with what an enqueue from SQL may decide for each (its merge rule,
// whether it is a singleton). A kind whose limits first appear gets its pending jobs gated.
func (w *Worker[S]) recordLimits(ctx context.Context) error {
	for _, k := range w.kinds {
		reg := w.reg[k]
		l := reg.limits
		// One transaction: limits that appear are never recorded without their kind's
		// pending jobs gated (a retry after a failure would see them as unchanged).
		err := inTx(ctx, w.ctl, pgx.TxOptions{}, idleTxBound(w.cfg.Lease), func(tx pgx.Tx) error {
			row, err := w.q.SetKindLimits(ctx, tx, dbsqlc.SetKindLimitsParams{
				Kind: k, Concurrency: int32(l.Concurrency), RateN: int32(l.Rate.N), RatePeriodUs: max(delayOf(l.Rate.Per), 1),
				RateByPart: l.Rate.PerPartition, BrkFailures: int32(l.Breaker.Failures),
				BrkCooldownUs: max(delayOf(l.Breaker.Cooldown), 1), BrkByPart: l.Breaker.PerPartition,
				Merge: reg.merge, MergeDue: int16(reg.mergeDue.Policy), MergeDelayUs: delayOf(reg.mergeDue.Delay),
				MergeMaxWaitUs: delayOf(reg.mergeDue.MaxWait), Singleton: reg.singleton != nil,
			})
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // unchanged
			}
			if err != nil {
				return fmt.Errorf("venturi: record the limits of %q: %w", k, err)
			}
			if !row.NewlyLimited.Bool || !row.Limited.Bool {
				return nil
			}
			n, err := w.q.GatePendingOfKind(ctx, tx, k)
			if err != nil {
				return fmt.Errorf("venturi: gate the pending jobs of %q: %w", k, err)
			}
			w.log.Info("venturi: kind has limits now; its pending jobs are gated", "kind", k, "jobs", n)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// connect opens the worker's control pool. Unless the pool names the application, its
// connections are named after the worker in pg_stat_activity ("venturi <ID>").
func (w *Worker[S]) connect(ctx context.Context) (*pgxpool.Pool, error) {
	cc := w.pool.Config()
	// Each further queue adds a fetcher: its claims and its releases of stale prefetches.
	cc.MaxConns, cc.MinConns = int32(controlConns+2*(len(w.cfg.Queues)-1)), 0
	// These connections run a dozen statements: pgx's default caches (512 entries each,
	// allocated up front) would be most of their memory.
	cc.ConnConfig.StatementCacheCapacity, cc.ConnConfig.DescriptionCacheCapacity = 32, 32
	if cc.ConnConfig.RuntimeParams["application_name"] == "" { // keep the application's own name
		name := "venturi " + w.cfg.ID
		if len(name) > 63 {
			name = name[:63]
		}
		cc.ConnConfig.RuntimeParams["application_name"] = name
	}
	ctl, err := pgxpool.NewWithConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("venturi: control pool: %w", err)
	}
	if err := ctl.Ping(ctx); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("venturi: connect: %w", err)
	}
	return ctl, nil
}

func (w *Worker[S]) goBg(f func()) {
	w.bg.Add(1)
	go func() { defer w.bg.Done(); f() }()
}

// Stop shuts the worker down: it stops claiming and releases claimed jobs that have not
// started, signals running handlers (Run.Shutdown), waits up to ShutdownGrace, then
// cancels their contexts. A run cut this way returns to pending with an interrupted
// journal entry and does not count as a failure. Stop returns nil once every result is
// written and every connection closed.
//
// Stop returns by ctx's deadline whatever the database does (it may be unreachable): it
// then cancels the handlers and every statement in flight and returns ctx's error. What
// was not written by then is left to the leases: the jobs return to available when
// their leases expire, with an abandoned entry that counts as a failure. Give Stop a
// deadline longer than ShutdownGrace (plus a few seconds to write the results) so that a
// normal shutdown never gets there. Calling Stop again waits for the same shutdown.
func (w *Worker[S]) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		w.mu.Unlock()
		return nil
	}
	first := !w.stopping
	w.stopping = true
	w.mu.Unlock()
	if first {
		go func() { w.shutdown(); close(w.stopped) }()
	}
	select {
	case <-w.stopped:
		return nil
	case <-ctx.Done():
		for _, e := range w.execs {
			e.Cancel(errShutdown)
		}
		w.abortDB()
		return ctx.Err()
	}
}

// shutdown is Stop's sequence. Each step ends early once dbCtx is cancelled.
func (w *Worker[S]) shutdown() {
	w.stopFetch()
	<-w.fetchDone // releases the prefetch buffer; no handler starts after this
	for _, e := range w.execs {
		e.Shutdown()
	}
	w.tracker.StopAll() // gated runs have a stop signal of their own
	idle := w.idle()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	select {
	case <-idle:
	case <-grace.C:
	case <-w.dbCtx.Done():
	}
	grace.Stop()
	for _, e := range w.execs {
		e.Cancel(errShutdown)
	}
	stuck := time.NewTimer(min(5*time.Second, w.cfg.Lease/2))
	select {
	case <-idle:
	case <-stuck.C:
		// Handlers that ignore cancellation: release their jobs now; their late writes
		// fail the fencing token.
		w.releaseStuck()
	case <-w.dbCtx.Done():
	}
	stuck.Stop()
	w.fin.Close()
	w.stopBg()
	w.bg.Wait()
	w.abortDB()
	w.ctl.Close()
	w.log.Info("venturi worker stopped")
}

// idle returns a channel closed when no handler of any queue is running.
func (w *Worker[S]) idle() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, e := range w.execs {
			<-e.Idle()
		}
		close(done)
	}()
	return done
}

// Run starts the worker, blocks until ctx is done, then stops it with Stop, without a
// deadline.
func (w *Worker[S]) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return w.Stop(context.Background())
}

// releaseStuck returns the jobs of handlers that did not return after cancellation to
// available, with an interrupted entry.
func (w *Worker[S]) releaseStuck() {
	runs := w.tracker.Stuck()
	if len(runs) == 0 {
		return
	}
	reqs := make([]*jobrun.End, len(runs))
	for i, j := range runs {
		reqs[i] = &jobrun.End{Job: j, State: dbsqlc.VenturiJobStateAvailable, Ended: time.Now(),
			Entry: journalenc.Entry{Event: string(EventInterrupted), Note: "interrupted by shutdown: handler did not return after cancellation"}}
	}
	ctx, cancel := context.WithTimeout(w.dbCtx, 5*time.Second)
	defer cancel()
	err := sendIndexed(ctx, w.ctl, func(b *pgx.Batch) { dbsqlc.QueueFinishRuns(b, completer.Params(w.cfg.ID, w.cfg.keep(), reqs), nil) })
	if err != nil {
		w.log.Warn("venturi: release of stuck runs failed; their leases will expire", "err", err)
	}
	for _, j := range runs {
		w.tracker.Remove(j)
	}
}

// Subscribe delivers, in process, the lifecycle events of this worker's own runs: started
// (claimed and handed to a handler), then the run's end once it is durable (completed,
// paused, failed with its retry delay, dead, waiting, cancelled, replaced, interrupted),
// or lease_lost when the run's result was refused because the job had been rescued. It
// sees neither enqueues nor other workers' runs nor rescues: the durable stream
// ([Queue.Events]) has every transition of the jobs that opted in. A subscriber never
// slows the worker: see [Subscription] for what happens when it falls behind. It may be
// called before or after Start.
func (w *Worker[S]) Subscribe(cfg SubscribeConfig) *Subscription {
	return w.hub.subscribe(cfg)
}
