package venturi

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Batch sizes of the maintenance statements. They bound one statement (and the row locks
// one transaction holds), not the work per tick: a tick repeats every step whose batch
// came back full until it catches up or its time budget runs out, so retention, rescue
// and promotion keep pace with any throughput.
const (
	// RescueBatch is the most expired leases one rescue statement returns to available.
	RescueBatch = 1000
	// PromoteBatch is the most scheduled jobs one promotion statement makes available.
	PromoteBatch = 1000
	// PruneBatch is the most finished jobs one prune statement deletes.
	PruneBatch = 5000
)

// maintainer does the schema's housekeeping in three duties, each done by one worker at a
// time (whichever takes the duty's transaction-scoped advisory lock in a tick), so that no
// duty waits for another:
//
//   - leases and due work (the maintenance lock), every Config.MaintenanceInterval: it
//     rescues runs whose lease expired and promotes scheduled jobs that came due;
//   - retention (the retention lock), on a loop of its own at the same interval: it prunes
//     completed, dead and cancelled jobs and events past their retention, and sweeps the
//     gates nothing uses (rate windows and breakers idle for Config.RetainIdleGates);
//   - stats (the stats lock), on the retention loop: a sample every Config.StatsInterval
//     (ops_stats.go).
//
// A prune subtracts what it deletes from the stats in its transaction, which waits for a
// sample in progress (venturi_stats_forget), and a sample of a large table takes seconds:
// neither may hold up rescue, so rescue and promotion share neither a lock, a transaction
// nor a goroutine with them.
type maintainer struct {
	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	q       *dbsqlc.Queries
	rescued func() // rescued jobs are claimable: look for them

	leases    duty // rescue and promotion
	retention duty // pruning
	gates     duty // the idle gates' sweep

	rescuedRuns int       // runs the leases loop's current tick rescued
	statsNext   time.Time // when a stats sample may be due next (ops_stats.go); a hint, the database decides

	gateAfter     string    // the sweep of idle gates goes on after this key ("": from the start)
	gateSweepNext time.Time // when the next sweep of idle gates starts
}

// A duty is a set of maintenance steps done under one advisory lock.
type duty struct {
	name        string
	lock        func(context.Context, dbsqlc.DBTX) (bool, error)
	steps       []step
	behindSince time.Time // when a tick last ran out of budget with work left (zero: caught up)
	lastWarn    time.Time
}

// A step does one batch of a duty's work in the duty's transaction and reports how many
// rows it took; a batch that came back full (batch rows) means there is more to do now.
type step struct {
	name  string
	batch int
	do    func(ctx context.Context, tx pgx.Tx) (rows int, err error)
}

func newMaintainer(cfg Config, log *slog.Logger, db *pgxpool.Pool, q *dbsqlc.Queries, rescued func()) *maintainer {
	m := &maintainer{cfg: cfg, log: log, db: db, q: q, rescued: rescued}
	m.leases = duty{name: "leases", lock: q.TryMaintenanceLock, steps: []step{
		{"rescue", RescueBatch, m.rescue},
		{"promote", PromoteBatch, m.promote},
	}}
	m.retention = duty{name: "retention", lock: q.TryRetentionLock, steps: []step{
		{"prune_completed", PruneBatch, m.pruneJobs(dbsqlc.VenturiJobStateCompleted, cfg.RetainCompleted)},
		{"prune_dead", PruneBatch, m.pruneJobs(dbsqlc.VenturiJobStateDead, cfg.RetainDead)},
		{"prune_cancelled", PruneBatch, m.pruneJobs(dbsqlc.VenturiJobStateCancelled, cfg.RetainCompleted)},
		{"prune_events", PruneBatch, m.pruneEvents},
	}}
	// Its own transactions: they hold every gate stripe, which the gated claims take.
	m.gates = duty{name: "gates", lock: q.TryRetentionLock, steps: []step{{"prune_idle_gates", GateSweepBatch, m.pruneIdleGates}}}
	return m
}

// maintenanceBudget is how long one tick may keep repeating full batches: the interval,
// at least 250ms so that a short interval still catches up, at most 5s so that a tick
// never holds up shutdown for long.
func (m *maintainer) maintenanceBudget() time.Duration {
	return min(max(m.cfg.MaintenanceInterval, 250*time.Millisecond), 5*time.Second)
}

// run does the maintainer's duties until ctx ends: leases and due work here, retention and
// stats on a goroutine of their own, cron on another (cron.go).
func (m *maintainer) run(ctx context.Context) {
	defer m.startCron(ctx)() // durable cron (cron.go): fires due schedules beside the ticks
	retained := make(chan struct{})
	go func() { defer close(retained); m.runRetention(ctx) }()
	defer func() { <-retained }()
	t := time.NewTicker(m.cfg.MaintenanceInterval)
	defer t.Stop()
	healthySince := time.Time{} // zero: healthy since start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rescue := healthySince.IsZero() || time.Since(healthySince) >= m.cfg.Lease
		m.rescuedRuns = 0
		_, err := m.tick(ctx, &m.leases, []bool{rescue, true})
		if m.rescuedRuns > 0 {
			m.rescued() // rescued jobs are claimable once their transaction has committed
		}
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("venturi: maintenance failed", "err", err, "transient", IsTransient(err))
			}
			healthySince = time.Now() // after an outage, give live workers a lease to extend
		}
	}
}

// runRetention prunes and samples the stats every MaintenanceInterval until ctx ends.
func (m *maintainer) runRetention(ctx context.Context) {
	t := time.NewTicker(m.cfg.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		all := []bool{true, true, true, true}
		if _, err := m.tick(ctx, &m.retention, all); err != nil && ctx.Err() == nil {
			m.log.Warn("venturi: retention failed", "err", err, "transient", IsTransient(err))
		}
		if !time.Now().Before(m.gateSweepNext) {
			_, err := m.tick(ctx, &m.gates, []bool{true})
			if err != nil && ctx.Err() == nil {
				m.log.Warn("venturi: pruning idle gates failed", "err", err, "transient", IsTransient(err))
			}
			if m.gateAfter == "" || err != nil { // swept (or another worker sweeps, or it failed): later
				m.gateSweepNext = time.Now().Add(max(m.cfg.RetainIdleGates/4, m.cfg.MaintenanceInterval))
			}
		}
		m.sampleStatsIfDue(ctx)
	}
}

// tick does the steps of d marked in work if this worker gets d's lock: one round of them
// in one transaction, then further rounds of the steps whose batch was full, each in its
// own transaction (so no transaction holds more than a batch of row locks), until every
// step has caught up or the budget is spent. held says the worker had the lock.
func (m *maintainer) tick(ctx context.Context, d *duty, work []bool) (held bool, err error) {
	deadline := time.Now().Add(m.maintenanceBudget())
	for slices.Contains(work, true) {
		held, work, err = m.round(ctx, d, work)
		if err != nil || !held {
			return held, err
		}
		if slices.Contains(work, true) && time.Now().After(deadline) {
			m.fellBehind(d, work)
			return held, nil
		}
	}
	d.behindSince = time.Time{}
	return held, nil
}

// round runs one batch of each step of d marked in work, in one transaction under d's
// lock. It reports which batches came back full.
func (m *maintainer) round(ctx context.Context, d *duty, work []bool) (held bool, full []bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	full = make([]bool, len(d.steps))
	// Idle-bounded (inHotTx): a maintainer cut off mid-round must not keep the lock, and with it
	// every other worker's rescue, until its network heals.
	err = inHotTx(ctx, m.db, idleTxBound(m.cfg.Lease), func(tx pgx.Tx) error {
		locked, err := d.lock(ctx, tx)
		if err != nil || !locked {
			return err
		}
		held = true
		for i, s := range d.steps {
			if !work[i] {
				continue
			}
			n, err := s.do(ctx, tx)
			if err != nil {
				return err
			}
			full[i] = n >= s.batch
		}
		return nil
	})
	if err != nil || !held {
		return held, nil, err
	}
	return held, full, nil
}

// rescue ends a batch of runs whose lease expired; an abandoned run is a failure for its
// breaker.
func (m *maintainer) rescue(ctx context.Context, tx pgx.Tx) (int, error) {
	rows, err := m.q.RescueExpired(ctx, tx, dbsqlc.RescueExpiredParams{
		Max: RescueBatch, MinUptimeUs: delayOf(m.cfg.Lease)})
	if err != nil {
		return 0, err
	}
	var brk dbsqlc.BreakerRecordParams
	for _, r := range rows {
		m.log.Warn("venturi: rescued a run whose lease expired", "job", ulidOf(r.ID), "kind", r.Kind, "state", r.State)
		if r.Breaker.Valid {
			brk.Keys = append(brk.Keys, r.Breaker.String)
			brk.Failed = append(brk.Failed, true)
		}
	}
	if len(brk.Keys) > 0 {
		if err := recordBreakers(ctx, tx, m.q, brk, m.log); err != nil {
			return 0, err
		}
	}
	m.rescuedRuns += len(rows) // a wake-up to fetch: harmless if the round rolls back
	return len(rows), nil
}

// promote makes a batch of scheduled jobs that came due available.
func (m *maintainer) promote(ctx context.Context, tx pgx.Tx) (int, error) {
	n, err := m.q.PromoteDue(ctx, tx, PromoteBatch)
	return int(n), err
}

// pruneJobs deletes a batch of jobs in state finished more than age ago, and forgets them
// in the stats.
func (m *maintainer) pruneJobs(state dbsqlc.VenturiJobState, age time.Duration) func(context.Context, pgx.Tx) (int, error) {
	return func(ctx context.Context, tx pgx.Tx) (int, error) {
		n, err := m.q.PruneFinished(ctx, tx, dbsqlc.PruneFinishedParams{State: state, AgeUs: delayOf(age), Max: PruneBatch})
		return int(n), err
	}
}

// pruneEvents deletes a batch of events of the durable stream, which is kept as long as
// the jobs it describes.
func (m *maintainer) pruneEvents(ctx context.Context, tx pgx.Tx) (int, error) {
	n, err := m.q.PruneEvents(ctx, tx, dbsqlc.PruneEventsParams{
		AgeUs: delayOf(max(m.cfg.RetainCompleted, m.cfg.RetainDead)), Max: PruneBatch})
	return int(n), err
}

// GateSweepBatch is the most gates one statement of the idle gates' sweep reads.
const GateSweepBatch = 1000

// pruneIdleGates sweeps the next batch of gates in key order, deleting the idle ones
// (PruneIdleGates). A sweep that reaches the end starts again a quarter of
// RetainIdleGates later (runRetention).
func (m *maintainer) pruneIdleGates(ctx context.Context, tx pgx.Tx) (int, error) {
	if err := m.q.LockGateStripes(ctx, tx); err != nil {
		return 0, err
	}
	r, err := m.q.PruneIdleGates(ctx, tx, dbsqlc.PruneIdleGatesParams{
		After: m.gateAfter, Max: GateSweepBatch, IdleUs: delayOf(m.cfg.RetainIdleGates)})
	if err != nil {
		return 0, err
	}
	if r.Deleted > 0 {
		m.log.Debug("venturi: pruned idle gates", "gates", r.Deleted)
	}
	m.gateAfter = r.LastKey
	if r.Scanned < GateSweepBatch {
		m.gateAfter = "" // the sweep reached the end
	}
	return int(r.Scanned), nil
}

// fellBehind logs, at most once a minute per duty, that a tick ran out of budget with full
// batches still coming back: retention (or rescue, or promotion) is not keeping pace.
func (m *maintainer) fellBehind(d *duty, work []bool) {
	now := time.Now()
	if d.behindSince.IsZero() {
		d.behindSince = now
	}
	if now.Sub(d.lastWarn) < time.Minute {
		return
	}
	d.lastWarn = now
	var steps []string
	for i, s := range d.steps {
		if work[i] {
			steps = append(steps, s.name)
		}
	}
	m.log.Warn("venturi: maintenance is behind: a tick's budget ran out with work left",
		"duty", d.name, "behind_for", now.Sub(d.behindSince).Round(time.Second), "budget", m.maintenanceBudget(),
		"steps", steps)
}
