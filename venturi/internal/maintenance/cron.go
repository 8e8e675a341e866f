package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/cronexpr"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/lograte"
	"github.com/venturi-dev/venturi/internal/pgerr"
)

// The missed-fire policies of a schedule, as venturi_cron stores them (venturi.MissedPolicy).
const (
	// MissedOnce enqueues one job for all the missed fires, at the latest missed time.
	MissedOnce = "once"
	// MissedSkip enqueues nothing for missed fires.
	MissedSkip = "skip"
	// MissedBackfill enqueues one job per missed fire, the latest backfill of them.
	MissedBackfill = "backfill"
)

// cronFiresPerPass is the most schedules one pass fires before it reports that it
// stopped with schedules left.
const cronFiresPerPass = 100

// cronPruneRounds is the most batches of ledger rows one prune deletes.
const cronPruneRounds = 10

// plannedFire is one fire a catch-up enqueues.
type plannedFire struct {
	at     time.Time
	covers int // fire times it stands for (itself included)
}

// firePlan is what one transaction does for a due schedule.
type firePlan struct {
	fires     []plannedFire
	next      time.Time // the schedule's next_fire afterwards
	skipped   int       // fire times skipped in this catch-up
	coalesced int       // fire times folded into another fire
	missed    int       // fire times missed (enqueued late, coalesced or skipped)
	missedTo  time.Time // the latest missed fire time
}

// planFires decides which fire times of a schedule whose earliest unhandled fire is next
// to enqueue at now (database time): every fire in [now-grace, now] is on time; older
// ones are missed and handled by the policy (an unknown one is MissedOnce). At most batch
// fires are planned; the rest are left for the next transaction. At most countLimit
// missed fire times are counted.
func planFires(c *cronexpr.Spec, loc *time.Location, next, now time.Time, policy string, backfill int, grace time.Duration, batch, countLimit int) firePlan {
	var p firePlan
	onTimeFrom := now.Add(-grace)
	if next.Before(onTimeFrom) {
		n := countFires(c, loc, next, onTimeFrom, countLimit)
		p.missed = n
		switch policy {
		case MissedSkip:
			p.skipped = n
			p.missedTo = lastFires(c, loc, next, onTimeFrom, 1)[0]
		case MissedBackfill:
			last := lastFires(c, loc, next, onTimeFrom, backfill)
			for _, f := range last {
				p.fires = append(p.fires, plannedFire{at: f, covers: 1})
			}
			p.skipped = max(n-len(last), 0)
			p.missedTo = last[len(last)-1]
		default: // MissedOnce
			last := lastFires(c, loc, next, onTimeFrom, 1)
			p.fires = append(p.fires, plannedFire{at: last[0], covers: n})
			p.coalesced = n - 1
			p.missedTo = last[0]
		}
		next = c.Next(onTimeFrom.Add(-time.Nanosecond), loc) // the first on-time fire
	}
	for f := next; !f.IsZero() && !f.After(now); f = c.Next(f, loc) {
		p.fires = append(p.fires, plannedFire{at: f, covers: 1})
		if len(p.fires) > batch {
			break
		}
	}
	if len(p.fires) > batch {
		p.fires = p.fires[:batch]
		p.next = c.Next(p.fires[batch-1].at, loc)
	} else {
		p.next = c.NextOrNever(now, loc)
	}
	return p
}

// countFires counts the fire times in [from, until), from being one, up to limit.
func countFires(c *cronexpr.Spec, loc *time.Location, from, until time.Time, limit int) int {
	n := 0
	for f := from; !f.IsZero() && f.Before(until) && n < limit; f = c.Next(f, loc) {
		n++
	}
	return n
}

// lastFires returns the latest k fire times in [from, until), oldest first (from is a
// fire time before until, so there is at least one). It looks back through windows that
// grow until they hold k fires, so its cost follows the fires it returns, not the length
// of the outage.
func lastFires(c *cronexpr.Spec, loc *time.Location, from, until time.Time, k int) []time.Time {
	for _, d := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 400 * 24 * time.Hour, 0} {
		start := until.Add(-d)
		final := d == 0 || !start.After(from)
		if final {
			start = from.Add(-time.Nanosecond)
		}
		var got []time.Time
		for f := c.Next(start, loc); !f.IsZero() && f.Before(until); f = c.Next(f, loc) {
			got = append(got, f)
			if len(got) > k {
				got = got[1:]
			}
		}
		if len(got) >= k || final {
			if len(got) == 0 {
				return []time.Time{from}
			}
			return got
		}
	}
	return []time.Time{from}
}

// CronFirerConfig configures a CronFirer.
type CronFirerConfig struct {
	// Interval is how often the firer probes for a due schedule when none is due sooner.
	Interval time.Duration
	// Batch is the most fires one transaction enqueues; a longer catch-up continues in the
	// next transaction.
	Batch int
	// CountLimit bounds how many missed fire times a catch-up counts.
	CountLimit int
	// LockedRetry is how soon the firer looks again at a schedule that is due now (one
	// that another worker is firing).
	LockedRetry time.Duration
	// PruneBatch is the most ledger rows one prune statement deletes.
	PruneBatch int
	// RetainFires is how long the ledger keeps a fire.
	RetainFires time.Duration
	// InTx runs each fire's transaction.
	InTx TxFunc
	// Notify, when not nil, wakes the workers for a job of kind that a fire inserted, in
	// the fire's transaction. Nil: workers only poll.
	Notify func(ctx context.Context, tx pgx.Tx, kind string) error
	// Logger receives missed fires and failures.
	Logger *slog.Logger
}

// A CronFirer fires the due schedules of the schema. Every worker runs one; the schedule
// rows' locks and next_fire, not any worker's memory, decide who fires what. A CronFirer
// is used by one goroutine at a time.
type CronFirer struct {
	cfg CronFirerConfig // as given to the constructor
	db  dbsqlc.DBTX     // where the probe and the prune run (the pool)
	q   *dbsqlc.Queries // the generated statements

	mu        sync.Mutex                // guards specs and locs
	specs     map[string]*cronexpr.Spec // parsed expressions by text
	locs      map[string]*time.Location // loaded zones by name
	warned    map[string]bool           // schedules this worker cannot load, logged once
	failLog   lograte.Limiter           // the firing loop's warnings while every tick fails
	lastPrune time.Time                 // when the ledger was last pruned
}

// NewCronFirer returns a firer that probes and prunes through db and runs q's statements.
func NewCronFirer(cfg CronFirerConfig, db dbsqlc.DBTX, q *dbsqlc.Queries) *CronFirer {
	return &CronFirer{cfg: cfg, db: db, q: q,
		specs: map[string]*cronexpr.Spec{}, locs: map[string]*time.Location{}, warned: map[string]bool{}}
}

// Run fires due schedules until ctx ends: at once, then when the earliest schedule is due
// or every Interval, whichever is sooner, and prunes the ledger about once a minute.
func (s *CronFirer) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wait := s.cfg.Interval
		more, dueIn, err := s.RunOnce(ctx)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			s.failLog.Warn(s.cfg.Logger, "venturi: firing schedules failed", "err", err, "transient", pgerr.IsTransient(err))
		case more:
			wait = 0
		case dueIn != nil:
			wait = min(max(*dueIn, s.cfg.LockedRetry), wait)
		}
		if err == nil {
			s.failLog.OK()
		}
		if err == nil && time.Since(s.lastPrune) > time.Minute {
			s.Prune(ctx)
		}
		t.Reset(wait)
	}
}

// RunOnce fires due schedules at the database time, one transaction each. It reports
// whether it stopped with schedules left, and how long until the earliest schedule is due
// (nil: there is none).
func (s *CronFirer) RunOnce(ctx context.Context) (more bool, dueIn *time.Duration, err error) {
	return s.fireDue(ctx, nil)
}

// FireDueAt is RunOnce with the database time taken to be now: it fires what is due at
// now, without the probe. Tests use it to walk the clock through time-zone changes.
func (s *CronFirer) FireDueAt(ctx context.Context, now time.Time) (more bool, dueIn *time.Duration, err error) {
	return s.fireDue(ctx, &now)
}

// fireDue fires due schedules, one transaction each, at the database time (or at now
// when it is not nil).
func (s *CronFirer) fireDue(ctx context.Context, now *time.Time) (more bool, dueIn *time.Duration, err error) {
	if now == nil {
		// The probe every worker runs each maintenance interval: one statement, an index
		// scan of venturi_cron_due_idx for its first entry. Only a due schedule costs a
		// transaction.
		if dueIn, err := s.nextDue(ctx); err != nil || dueIn == nil || *dueIn > 0 {
			return false, dueIn, err
		}
	}
	var skip []string
	for i := 0; ; i++ {
		if i == cronFiresPerPass {
			return true, nil, nil
		}
		found, err := s.fireOne(ctx, now, &skip)
		if err != nil {
			return false, nil, err
		}
		if !found {
			break
		}
	}
	dueIn, err = s.nextDue(ctx)
	if len(skip) > 0 && dueIn != nil && *dueIn <= 0 {
		// Due, but a schedule this worker cannot load (left to others): look again at the
		// next maintenance interval, not at once.
		return false, nil, err
	}
	return false, dueIn, err
}

// nextDue returns how long until the earliest unpaused schedule is due by the database
// clock (zero or less: due now), or nil when there is none.
func (s *CronFirer) nextDue(ctx context.Context) (*time.Duration, error) {
	us, err := s.q.CronNextDue(ctx, s.db)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	d := time.Duration(us) * time.Microsecond
	return &d, nil
}

// load returns a schedule's parsed expression and zone, cached.
func (s *CronFirer) load(spec, tz string) (*cronexpr.Spec, *time.Location, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.specs[spec]
	if !ok {
		var err error
		if c, err = cronexpr.Parse(spec); err != nil {
			return nil, nil, err
		}
		s.specs[spec] = c
	}
	loc, ok := s.locs[tz]
	if !ok {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			return nil, nil, err
		}
		s.locs[tz] = loc
	}
	return c, loc, nil
}

// fireOne fires the earliest due schedule that no other worker is firing, in one
// transaction: the ledger rows and jobs of its due fires, and its next_fire moved past
// them. It reports whether it found one.
func (s *CronFirer) fireOne(ctx context.Context, now *time.Time, skip *[]string) (bool, error) {
	found := false
	ctx, cancel := context.WithTimeout(ctx, roundTimeout)
	defer cancel()
	err := s.cfg.InTx(ctx, func(tx pgx.Tx) error {
		row, err := s.q.CronDue(ctx, tx, dbsqlc.CronDueParams{Now: now, Skip: append([]string{}, *skip...)})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		c, loc, err := s.load(row.Spec, row.TimeZone)
		if err != nil {
			*skip = append(*skip, row.Name)
			if !s.warned[row.Name] {
				s.warned[row.Name] = true
				s.cfg.Logger.Error("venturi: cannot fire schedule here; leaving it to other workers", "schedule", row.Name, "err", err)
			}
			return nil
		}
		p := planFires(c, loc, row.NextFire, row.Now, row.Missed, int(row.Backfill),
			time.Duration(row.GraceUs)*time.Microsecond, s.cfg.Batch, s.cfg.CountLimit)
		pending := int(row.SkippedPending) + p.skipped
		adv := dbsqlc.CronAdvanceParams{Name: row.Name, NextFire: p.next, Skipped: int32(p.skipped), Coalesced: int32(p.coalesced)}
		inserted := false
		for _, f := range p.fires {
			if row.DedupKey != "" {
				if _, err := s.q.DedupLock(ctx, tx, dbsqlc.DedupLockParams{Kind: row.Kind, DedupKey: row.DedupKey}); err != nil {
					return err
				}
			}
			r, err := s.q.CronFire(ctx, tx, dbsqlc.CronFireParams{Name: row.Name, FireAt: f.at,
				ID:     pgtype.UUID{Bytes: ulid.Make(), Valid: true},
				Covers: int32(f.covers), Skipped: int32(pending), DedupKey: row.DedupKey, Kind: row.Kind})
			if errors.Is(err, pgx.ErrNoRows) {
				s.cfg.Logger.Error("venturi: schedule fire already in the ledger; not enqueued again", "schedule", row.Name, "fire", f.at)
				continue
			}
			if err != nil {
				return err
			}
			pending = 0
			adv.Fires++
			at := f.at
			adv.LastFire, adv.LastJob = &at, r.JobID
			inserted = inserted || r.Action == "inserted"
		}
		adv.SkippedPending = int32(pending)
		if err := s.q.CronAdvance(ctx, tx, adv); err != nil {
			return err
		}
		if p.missed > 0 {
			s.cfg.Logger.Warn("venturi: schedule missed fires", "schedule", row.Name, "policy", row.Missed,
				"missed", p.missed, "from", row.NextFire, "to", p.missedTo, "skipped", p.skipped, "coalesced", p.coalesced)
		}
		if inserted && s.cfg.Notify != nil {
			return s.cfg.Notify(ctx, tx, row.Kind)
		}
		return nil
	})
	return found, err
}

// Prune deletes ledger rows older than RetainFires, a batch at a time, at most
// cronPruneRounds batches.
func (s *CronFirer) Prune(ctx context.Context) {
	s.lastPrune = time.Now()
	for range cronPruneRounds {
		n, err := s.q.CronPruneFires(ctx, s.db, dbsqlc.CronPruneFiresParams{AgeUs: micros(s.cfg.RetainFires), Max: int32(s.cfg.PruneBatch)})
		if err != nil || n < int64(s.cfg.PruneBatch) {
			return
		}
	}
}
