// Package fetcher holds venturi's fetcher ([Fetcher]): the worker's service that claims
// jobs of one queue while its handlers have room and feeds them to the executor. One
// claim is in flight at a time; the room is the free handler slots plus the prefetch
// window, which grows for fast handlers and shrinks for slow ones, and buffered jobs that
// wait too long for a slot are released to other workers. An idle fetcher looks again
// when notified ([Fetcher.Notified], [Fetcher.Poke]), at its poll interval, or when the
// next scheduled job is due, whichever is first.
//
// A claim ([Fetcher.Claim]) is one round trip: it promotes the scheduled jobs that came
// due, claims gated jobs and then plain ones, and asks when the next scheduled job is
// due, in an explicit transaction committed once the results are read.
//
// The fetcher knows nothing of package venturi: it feeds the handlers through the small
// [Executor] interface, records the jobs it holds in the run tracker (internal/jobrun),
// and releases jobs through the [SendFunc] the worker gives it.
package fetcher

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/pgerr"
)

// Executor is what the fetcher needs of the handlers it feeds. Its methods are called
// from the fetch loop's goroutine.
type Executor interface {
	// Free reports how many handler slots are free.
	Free() int
	// Start runs j on a free slot; the caller has checked that one is free.
	Start(j *jobrun.Job)
	// Freed returns a channel that receives when a slot was freed (a wake-up, not a
	// count).
	Freed() <-chan struct{}
}

// SendFunc sends, in one round trip, the statements queue adds to a batch (the worker's
// sendIndexed: they run with index scans forced).
type SendFunc func(ctx context.Context, queue func(*pgx.Batch)) error

// Config configures a [Fetcher].
type Config struct {
	// WorkerID is the worker's ID, recorded in the leases of the jobs it claims. Required.
	WorkerID string
	// Queue is the queue the fetcher claims from. Required.
	Queue string
	// Kinds are the kinds the fetcher claims. Required.
	Kinds []string
	// Channel is the notification channel: the gated claim notifies the runs it
	// replaces on it. Empty: none.
	Channel string
	// Concurrency is how many handlers run the queue's jobs. Required (positive).
	Concurrency int
	// Prefetch is the most claimed jobs that may wait for a free handler slot.
	Prefetch int
	// PrefetchWait is the longest a prefetched job waits for a slot before it is released
	// for other workers. Required (positive).
	PrefetchWait time.Duration
	// ClaimBatch is the most jobs one claim asks for. Required (positive).
	ClaimBatch int
	// FetchCooldown is the shortest time between two claims.
	FetchCooldown time.Duration
	// PollInterval is how long an idle fetcher waits without a wake-up before it looks
	// again. Required (positive).
	PollInterval time.Duration
	// Lease is the lease a claim takes; a claim's statements are bounded by half of it.
	// Required (positive).
	Lease time.Duration
	// IdleTxMs is the claim transaction's idle_in_transaction_session_timeout setting
	// (milliseconds). Required.
	IdleTxMs string
	// MaxFailures is the failures after which a job is dead without running again; zero
	// or negative: no backstop.
	MaxFailures int
	// PromoteBatch is the most scheduled jobs a claim's promotion makes available.
	// Required (positive).
	PromoteBatch int
	// DB runs the claims. Required.
	DB *pgxpool.Pool
	// Send sends the release of unstarted jobs. Required.
	Send SendFunc
	// Executor runs the jobs the fetcher claims. Required by Run.
	Executor Executor
	// Tracker holds the jobs the fetcher claims until they start. Required.
	Tracker *jobrun.Tracker
	// DBCtx is the parent of every statement: cancelled when the worker gives up on
	// stopping, no statement outlives it. Required.
	DBCtx context.Context
	// Logger receives the fetcher's warnings. Required.
	Logger *slog.Logger
}

// Fetcher claims jobs while there is room and feeds them to the executor. One claim is
// in flight at a time (two in parallel measured slower: they contend for the same index
// and heap pages); while it is, the loop keeps moving buffered jobs into freed slots.
//
// The room is the free slots plus the prefetch window (see prefetchWindow): fast
// handlers get large claims, whose per-row cost on the server is far lower than that of
// many small ones, and slow handlers do not hoard jobs that other workers could run.
type Fetcher struct {
	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	kinds   []string
	exec    Executor
	tracker *jobrun.Tracker
	dbCtx   context.Context // cancelled when Stop gives up: no statement outlives it
	channel string          // the notification channel (the gated claim notifies replaced runs)

	wake     chan struct{} // a notification, a rescue or a reconnect asks for a fetch
	lastWake atomic.Int64  // UnixNano of the last notification for this worker's kinds

	// The loop's state, owned by run's goroutine.
	buffer    []*jobrun.Job // claimed, not started, oldest first
	window    prefetchWindow
	claiming  bool      // a claim is in flight
	lastClaim time.Time // when it (or the last one) was sent
	asked     int       // how many jobs it asked for
	askWakes  uint64    // wake-ups received when it was sent
	probeDue  bool      // the next claim (or the one in flight) asks when the next scheduled job is due (see claimed)
	wakes     uint64    // wake-ups received
	idle      bool      // the last claim found nothing: wait for a wake-up or the poll
	paused    bool      // the last claim found the queue paused: start nothing
	pollAt    time.Time // when an idle loop looks again without a wake-up
	notBefore time.Time // after a failed claim, no new one before this
	errDelay  time.Duration
}

const firstClaimRetry = 50 * time.Millisecond

// New returns a fetcher configured by cfg. It claims when it runs, or when Claim is
// called.
func New(cfg Config) *Fetcher {
	return &Fetcher{
		cfg: cfg, log: cfg.Logger, db: cfg.DB, kinds: cfg.Kinds, exec: cfg.Executor, tracker: cfg.Tracker,
		dbCtx: cfg.DBCtx, channel: cfg.Channel,
		wake:     make(chan struct{}, 1),
		window:   newPrefetchWindow(cfg.Concurrency, cfg.Prefetch, cfg.PrefetchWait),
		errDelay: firstClaimRetry,
		probeDue: true,
	}
}

// Poke asks the loop to look for jobs now.
func (f *Fetcher) Poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Notified is a notification for one of the worker's kinds.
func (f *Fetcher) Notified() {
	f.lastWake.Store(time.Now().UnixNano())
	f.Poke()
}

// ClaimResult is what a claim returned.
type ClaimResult struct {
	// Jobs are the claimed jobs, added to the tracker.
	Jobs []*jobrun.Job
	// NextDue is when the next scheduled job of the worker's kinds in its queue is due, by the local
	// clock (zero: none is scheduled, or the claim did not ask), as the database saw it when the
	// claim ran; a rate's or a breaker's wake-up when that is sooner.
	NextDue time.Time
	// Paused reports that the queue is paused.
	Paused bool
	// Err is the claim's error; the other fields are then empty.
	Err error
}

// Run is the fetch loop. When ctx ends it releases the buffered jobs (and those of a
// claim still in flight) to other workers.
func (f *Fetcher) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour) // Go 1.23 timers: Stop and Reset leave no stale tick
	timer.Stop()
	freed := f.exec.Freed()
	done := make(chan ClaimResult, 1)
	defer func() {
		if f.claiming {
			f.buffer = append(f.buffer, (<-done).Jobs...)
		}
		f.Release(f.buffer)
		f.buffer = nil
	}()
	for ctx.Err() == nil {
		f.feed()
		f.releaseStale()
		next := time.Duration(-1) // when to look again without an event; -1: never
		after := func(d time.Duration) {
			if next < 0 || d < next {
				next = max(d, 0)
			}
		}
		room := f.window.room(f.exec.Free(), len(f.buffer))
		// While the buffer still holds more than the claim could add, a claim can wait:
		// this keeps claims large instead of one round trip per freed slot.
		if !f.claiming && !f.idle && room > 0 && len(f.buffer) < room {
			wait := max(f.cfg.FetchCooldown-time.Since(f.lastClaim), time.Until(f.notBefore))
			if wait <= 0 {
				f.asked, f.askWakes = min(room, f.cfg.ClaimBatch), f.wakes
				f.lastClaim, f.claiming = time.Now(), true
				go func(n int, due bool) { done <- f.Claim(n, due) }(f.asked, f.probeDue)
				continue
			}
			after(wait)
		}
		if len(f.buffer) > 0 {
			after(f.cfg.PrefetchWait - time.Since(f.buffer[0].Sent)) // release stale prefetches
		}
		polling := f.idle && !f.claiming && len(f.buffer) == 0
		if polling {
			// Nothing due. Right after a notification, keep looking briefly: producers
			// debounce their NOTIFYs, so a job committed just after the last one may have
			// sent none.
			if time.Since(time.Unix(0, f.lastWake.Load())) < 20*time.Millisecond {
				f.idle = false
				continue
			}
			after(time.Until(f.pollAt)) // a deadline, not an interval: freed slots must not defer it
		}
		var tick <-chan time.Time
		if next >= 0 {
			timer.Reset(next)
			tick = timer.C
		}
		select {
		case r := <-done:
			f.claimed(r)
		case <-freed:
			f.window.slotFreed()
		case <-tick:
			if polling && !time.Now().Before(f.pollAt) {
				f.idle = false // the poll interval passed
			}
		case <-f.wake:
			f.wakes++
			f.idle = false
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

// feed moves buffered jobs into free handler slots, oldest first.
func (f *Fetcher) feed() {
	for len(f.buffer) > 0 && f.exec.Free() > 0 && !f.paused {
		j := f.buffer[0]
		f.window.started(time.Since(j.Sent))
		f.exec.Start(j)
		f.buffer[0] = nil // the backing array outlives the slice: do not keep the job alive
		f.buffer = f.buffer[1:]
	}
}

// claimed takes in the result of the claim in flight.
func (f *Fetcher) claimed(r ClaimResult) {
	f.claiming = false
	if r.Err != nil {
		if f.dbCtx.Err() == nil {
			f.log.Warn("venturi: claim failed", "err", r.Err, "transient", pgerr.IsTransient(r.Err))
			f.notBefore = time.Now().Add(f.errDelay)
			f.errDelay = min(f.errDelay*2, 5*time.Second)
		}
		return
	}
	f.errDelay = firstClaimRetry
	if f.paused = r.Paused; f.paused {
		// A paused queue starts nothing more: what this worker holds goes back.
		f.Release(append(f.buffer, r.Jobs...))
		f.buffer, r.Jobs = nil, nil
	}
	drained := len(f.buffer) == 0 && f.exec.Free() > 0
	f.window.claimed(f.asked, len(r.Jobs), time.Since(f.lastClaim), drained)
	f.buffer = append(f.buffer, r.Jobs...)
	// An empty claim means nothing is due, unless a notification came meanwhile. An idle
	// loop looks again at its poll interval, or when the next scheduled job is due if
	// that is sooner: a delayed job, a retry's backoff or a pause starts on time without
	// waiting for a poll or a promotion sweep.
	//
	// Only claims that may come back empty ask for the next due time: the first, and those
	// after a claim that returned fewer jobs than it asked for. A full claim's successor
	// is full or short, rarely empty, so the probe (two index lookups per kind: 1,000 for a
	// worker of 500 kinds) is skipped while the worker is busy. An empty claim that did
	// not ask is followed at once by one that does, instead of going idle (probeDue is
	// still what this claim was sent with: one claim is in flight at a time).
	f.idle = len(r.Jobs) == 0 && f.askWakes == f.wakes && f.probeDue
	f.probeDue = len(r.Jobs) < f.asked
	if f.idle {
		f.pollAt = time.Now().Add(f.cfg.PollInterval)
		if !r.NextDue.IsZero() && r.NextDue.Before(f.pollAt) {
			f.pollAt = r.NextDue
		}
	}
}

// releaseStale returns buffered jobs that waited longer than PrefetchWait to the queue.
func (f *Fetcher) releaseStale() {
	n := 0
	for n < len(f.buffer) && time.Since(f.buffer[n].Sent) > f.cfg.PrefetchWait {
		n++
	}
	if n == 0 {
		return
	}
	f.Release(f.buffer[:n])
	f.window.released()
	clear(f.buffer[:n]) // the backing array outlives the slice: do not keep the jobs alive
	f.buffer = f.buffer[n:]
}

// Claim promotes scheduled jobs that came due, claims up to n, and, when due is true, asks
// when the next scheduled job is due, in one round trip (one implicit transaction: the claim
// sees what the promotion made available). The claimed jobs are added to the tracker.
func (f *Fetcher) Claim(n int, due bool) ClaimResult {
	var (
		jobs     []*jobrun.Job
		dueInUs  int64
		wakeInUs int64 = -1
		paused   bool
		plain    []plainClaim
		evented  bool // the plain claim returned jobs that record events
	)
	sent := time.Now()
	b := &pgx.Batch{}
	b.Queue("BEGIN") // transaction control, not queue SQL: see send
	// The claim's locks (its jobs' rows, the gates' stripes) are held until the COMMIT that
	// follows the results: a worker cut off in between (a half-open network) must not
	// hold up every other worker's gated claim until the network heals. The same statement
	// has the claim's plans reach rows by index (see SetLocalIndexScans in queries/session.sql).
	dbsqlc.QueueSetLocalIdleTimeout(b, f.cfg.IdleTxMs)
	dbsqlc.QueuePromoteDue(b, int32(f.cfg.PromoteBatch))
	// Gated jobs first: their claim enforces the queue's pause and limits, slots, rates
	// and breakers; the plain claim below takes nothing from a paused or limited queue.
	dbsqlc.QueueClaimGated(b, dbsqlc.ClaimGatedParams{
		LeaseUs: delayOf(f.cfg.Lease), WorkerID: f.cfg.WorkerID, MaxFailures: int32(max(f.cfg.MaxFailures, 0)),
		Queue: f.cfg.Queue, Kinds: f.kinds, Max: int32(n), Channel: f.channel,
	}, func(row *dbsqlc.ClaimGatedRow) {
		if !row.ID.Valid { // a rate or a breaker holds jobs back until then
			if wakeInUs < 0 || row.WakeInUs < wakeInUs {
				wakeInUs = row.WakeInUs
			}
			return
		}
		j := &jobrun.Job{
			ID: ulid.ULID(row.ID.Bytes), Kind: row.Kind, Payload: row.Payload, Carry: row.Carry,
			Runs: int(row.Runs), Failures: int(row.Failures), Token: row.LeaseToken,
			Journal: row.Journal, JournalMoved: row.JournalMoved, Sent: sent, Started: row.AttemptedAt,
			Breaker: row.Breaker, Gated: true, Stop: jobrun.NewStop(), Queue: f.cfg.Queue, MetaJSON: row.Meta, Due: row.RunAt,
		}
		if row.Meta == nil { // committed after the statement's snapshot: read it on its own
			j.MetaJSON = []byte("?")
		}
		jobs = append(jobs, j)
	})
	dbsqlc.QueueClaim(b, dbsqlc.ClaimParams{
		LeaseUs: delayOf(f.cfg.Lease), WorkerID: f.cfg.WorkerID, MaxFailures: int32(max(f.cfg.MaxFailures, 0)),
		Queue: f.cfg.Queue, Kinds: f.kinds, Max: int32(n),
	}, func(row *dbsqlc.ClaimRow) {
		j := &jobrun.Job{
			ID: ulid.ULID(row.ID.Bytes), Kind: row.Kind, Payload: row.Payload, Carry: row.Carry,
			Runs: int(row.Runs), Failures: int(row.Failures), Token: row.LeaseToken.Int64,
			Journal: row.Journal, JournalMoved: row.JournalMoved, Sent: sent, Stop: jobrun.NewStop(),
			Queue: f.cfg.Queue, MetaJSON: row.Meta, Due: row.RunAt,
		}
		if row.AttemptedAt != nil {
			j.Started = *row.AttemptedAt
		}
		plain = append(plain, plainClaim{job: j, priority: row.Priority})
		evented = evented || row.Events
	})
	var next dbsqlc.NextDueRow
	dbsqlc.QueueNextDue(b, dbsqlc.NextDueParams{Queue: f.cfg.Queue, Due: due, Kinds: f.kinds}, &next)
	ctx, cancel := context.WithTimeout(f.dbCtx, f.cfg.Lease/2)
	defer cancel()
	if err := f.send(ctx, b, &evented); err != nil {
		return ClaimResult{Err: err}
	}
	dueInUs, paused = next.DueInUs, next.Paused
	// The plain claim returns its rows unordered: start them in the order it picked them.
	slices.SortFunc(plain, comparePlain)
	for _, p := range plain {
		jobs = append(jobs, p.job)
	}
	received := time.Now()
	for _, j := range jobs {
		j.Received = received
	}
	f.tracker.Add(jobs)
	r := ClaimResult{Jobs: jobs, Paused: paused}
	if wakeInUs >= 0 && (dueInUs < 0 || wakeInUs < dueInUs) {
		dueInUs = wakeInUs
	}
	if dueInUs >= 0 {
		r.NextDue = received.Add(time.Duration(dueInUs) * time.Microsecond)
	}
	return r
}

// plainClaim is a job the plain claim returned, with its priority for the sort.
type plainClaim struct {
	job      *jobrun.Job
	priority int16
}

// comparePlain orders plain claims as the claim picks them: most urgent first, then by
// due time, then by ID.
func comparePlain(a, b plainClaim) int {
	if c := cmp.Compare(b.priority, a.priority); c != 0 {
		return c
	}
	if c := a.job.Due.Compare(b.job.Due); c != 0 {
		return c
	}
	return a.job.ID.Compare(b.job.ID)
}

// send runs a claim batch in an explicit transaction, committed only once its results
// are here. A claim the worker gives up on (its timeout, a broken connection) therefore
// rolls back when its connection closes, even if the server runs it to the end: its jobs
// are never held by a claim nobody reads. (In the implicit transaction of a pipeline the
// server commits at the batch's end whether or not anyone reads the results.)
//
// When the plain claim returned jobs that record events (*evented, set as the batch's
// results are read), their started events are written in the same transaction, by a
// statement sent with the COMMIT (WriteStartedEvents): a claim that has none sends the
// COMMIT alone.
func (f *Fetcher) send(ctx context.Context, b *pgx.Batch, evented *bool) error {
	conn, err := f.db.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left in a transaction by an error is closed by the pool on release.
	defer conn.Release()
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	// The results are read: commit with a deadline of its own, so that a batch that used
	// up most of the claim's time does not leave the commit's outcome unknown.
	cctx, cancel := context.WithTimeout(f.dbCtx, f.cfg.Lease/2)
	defer cancel()
	if !*evented {
		_, err = conn.Exec(cctx, "COMMIT")
		return err
	}
	c := &pgx.Batch{}
	dbsqlc.QueueWriteStartedEvents(c, dbsqlc.WriteStartedEventsParams{LeaseUs: delayOf(f.cfg.Lease), WorkerID: f.cfg.WorkerID})
	c.Queue("COMMIT") // transaction control, not queue SQL
	return conn.SendBatch(cctx, c).Close()
}

// Release returns claimed jobs that never started, without recording a run, and removes
// them from the tracker. When it fails, their leases expire and the rescuer returns them.
func (f *Fetcher) Release(jobs []*jobrun.Job) {
	if len(jobs) == 0 {
		return
	}
	// In ID order, the lock order of every statement that takes many running jobs (the
	// lease extension): two of them in different orders deadlock.
	jobs = slices.SortedFunc(slices.Values(jobs), func(a, b *jobrun.Job) int { return a.ID.Compare(b.ID) })
	var p dbsqlc.ReleaseUnstartedParams
	for _, j := range jobs {
		p.Ids = append(p.Ids, pgtype.UUID{Bytes: j.ID, Valid: true})
		p.Tokens = append(p.Tokens, j.Token)
		f.tracker.Remove(j)
	}
	ctx, cancel := context.WithTimeout(f.dbCtx, 5*time.Second)
	defer cancel()
	if err := f.cfg.Send(ctx, func(b *pgx.Batch) { dbsqlc.QueueReleaseUnstarted(b, p, nil) }); err != nil {
		f.log.Warn("venturi: release of unstarted jobs failed; their leases will expire", "err", err)
	}
}

// delayOf converts a duration into the microseconds the SQL layer takes.
func delayOf(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return d.Microseconds()
}
