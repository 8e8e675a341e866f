package venturi

// The cron service: every worker fires due schedules (see cron.go for the schedules and
// their API, cronexpr.go for the parser).

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/cronexpr"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

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
// ones are missed and handled by the policy. At most batch fires are planned; the rest
// are left for the next transaction.
func planFires(c *cronexpr.Spec, loc *time.Location, next, now time.Time, policy MissedPolicy, backfill int, grace time.Duration, batch int) firePlan {
	var p firePlan
	onTimeFrom := now.Add(-grace)
	if next.Before(onTimeFrom) {
		n := countFires(c, loc, next, onTimeFrom, cronCountLimit)
		p.missed = n
		switch policy {
		case MissedSkip:
			p.skipped = n
			p.missedTo = lastFires(c, loc, next, onTimeFrom, 1)[0]
		case MissedOnce:
			last := lastFires(c, loc, next, onTimeFrom, 1)
			p.fires = append(p.fires, plannedFire{at: last[0], covers: n})
			p.coalesced = n - 1
			p.missedTo = last[0]
		case MissedBackfill:
			last := lastFires(c, loc, next, onTimeFrom, backfill)
			for _, f := range last {
				p.fires = append(p.fires, plannedFire{at: f, covers: 1})
			}
			p.skipped = max(n-len(last), 0)
			p.missedTo = last[len(last)-1]
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
		p.next = nextOrNever(c, now, loc)
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

// cronService fires the due schedules of the schema. Every worker runs one; the
// schedule rows' locks and next_fire, not any worker's memory, decide who fires what.
type cronService struct {
	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	q       *dbsqlc.Queries
	channel string

	mu        sync.Mutex
	specs     map[string]*cronexpr.Spec
	locs      map[string]*time.Location
	warned    map[string]bool // schedules this worker cannot load, logged once
	lastPrune time.Time
}

func newCronService(cfg Config, log *slog.Logger, db *pgxpool.Pool, q *dbsqlc.Queries) *cronService {
	return &cronService{cfg: cfg, log: log, db: db, q: q, channel: notifyChannel(db),
		specs: map[string]*cronexpr.Spec{}, locs: map[string]*time.Location{}, warned: map[string]bool{}}
}

// startCron runs the worker's cron service until ctx ends; the returned function waits
// for it to return. The maintainer starts it.
func (m *maintainer) startCron(ctx context.Context) (wait func()) {
	s := newCronService(m.cfg, m.log, m.db, m.q)
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx) }()
	return func() { <-done }
}

func (s *cronService) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wait := s.cfg.MaintenanceInterval
		more, dueIn, err := s.fireDue(ctx, nil)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("venturi: firing schedules failed", "err", err, "transient", IsTransient(err))
		case more:
			wait = 0
		case dueIn != nil:
			wait = min(max(*dueIn, cronLockedRetry), wait)
		}
		if err == nil && time.Since(s.lastPrune) > time.Minute {
			s.prune(ctx)
		}
		t.Reset(wait)
	}
}

// fireDue fires due schedules, one transaction each, at the database time (or at now
// when it is not nil: tests). It reports whether it stopped with schedules left, and how
// long until the earliest schedule is due (nil: there is none).
func (s *cronService) fireDue(ctx context.Context, now *time.Time) (more bool, dueIn *time.Duration, err error) {
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
		if i == 100 {
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
func (s *cronService) nextDue(ctx context.Context) (*time.Duration, error) {
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
func (s *cronService) load(spec, tz string) (*cronexpr.Spec, *time.Location, error) {
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
func (s *cronService) fireOne(ctx context.Context, now *time.Time, skip *[]string) (bool, error) {
	found := false
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := inTx(ctx, s.db, pgx.TxOptions{}, idleTxBound(s.cfg.Lease), func(tx pgx.Tx) error {
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
				s.log.Error("venturi: cannot fire schedule here; leaving it to other workers", "schedule", row.Name, "err", err)
			}
			return nil
		}
		p := planFires(c, loc, row.NextFire, row.Now, missedPolicyOf(row.Missed), int(row.Backfill),
			time.Duration(row.GraceUs)*time.Microsecond, cronBatch)
		pending := int(row.SkippedPending) + p.skipped
		adv := dbsqlc.CronAdvanceParams{Name: row.Name, NextFire: p.next, Skipped: int32(p.skipped), Coalesced: int32(p.coalesced)}
		inserted := false
		for _, f := range p.fires {
			if row.DedupKey != "" {
				if _, err := s.q.DedupLock(ctx, tx, dbsqlc.DedupLockParams{Kind: row.Kind, DedupKey: row.DedupKey}); err != nil {
					return err
				}
			}
			r, err := s.q.CronFire(ctx, tx, dbsqlc.CronFireParams{Name: row.Name, FireAt: f.at, ID: uuidOf(ulid.Make()),
				Covers: int32(f.covers), Skipped: int32(pending), DedupKey: row.DedupKey, Kind: row.Kind})
			if errors.Is(err, pgx.ErrNoRows) {
				s.log.Error("venturi: schedule fire already in the ledger; not enqueued again", "schedule", row.Name, "fire", f.at)
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
			s.log.Warn("venturi: schedule missed fires", "schedule", row.Name, "policy", row.Missed,
				"missed", p.missed, "from", row.NextFire, "to", p.missedTo, "skipped", p.skipped, "coalesced", p.coalesced)
		}
		if inserted && !s.cfg.PollOnly {
			return s.q.Notify(ctx, tx, dbsqlc.NotifyParams{Channel: s.channel, Payload: notifyPayload(row.Kind, true)})
		}
		return nil
	})
	return found, err
}

// prune deletes ledger rows older than RetainCompleted, a batch at a time.
func (s *cronService) prune(ctx context.Context) {
	s.lastPrune = time.Now()
	for range 10 {
		n, err := s.q.CronPruneFires(ctx, s.db, dbsqlc.CronPruneFiresParams{AgeUs: delayOf(s.cfg.RetainCompleted), Max: PruneBatch})
		if err != nil || n < PruneBatch {
			return
		}
	}
}
