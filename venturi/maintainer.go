package venturi

import (
	"context"
	"log/slog"
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

// maintainer does the schema's housekeeping on one worker at a time (whichever takes the
// maintenance advisory lock in a tick): it rescues runs whose lease expired, promotes
// scheduled jobs that came due, prunes completed and dead jobs past their retention, and
// samples the stats tables (ops_stats.go) every Config.StatsInterval.
type maintainer struct {
	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	q       *dbsqlc.Queries
	rescued func() // rescued jobs are claimable: look for them

	behindSince time.Time // when a tick last ran out of budget with work left (zero: caught up)
	lastWarn    time.Time
	statsNext   time.Time // when a stats sample may be due next (ops_stats.go); a hint, the database decides
}

// maintenanceBudget is how long one tick may keep repeating full batches: the interval,
// at least 250ms so that a short interval still catches up, at most 5s so that a tick
// never holds up shutdown for long.
func (m *maintainer) maintenanceBudget() time.Duration {
	return min(max(m.cfg.MaintenanceInterval, 250*time.Millisecond), 5*time.Second)
}

func (m *maintainer) run(ctx context.Context) {
	defer m.startCron(ctx)() // durable cron (cron.go): fires due schedules beside the ticks
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
		held, err := m.tick(ctx, rescue)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("venturi: maintenance failed", "err", err, "transient", IsTransient(err))
			}
			healthySince = time.Now() // after an outage, give live workers a lease to extend
			continue
		}
		if held { // the maintainer samples the stats, under the same lock, in its own transaction
			m.sampleStatsIfDue(ctx)
		}
	}
}

// maintenanceWork is what one round of a tick does, and what came back full.
type maintenanceWork struct {
	rescue, promote, pruneCompleted, pruneDead, pruneCancelled, pruneEvents bool
}

func (w maintenanceWork) any() bool {
	return w.rescue || w.promote || w.pruneCompleted || w.pruneDead || w.pruneCancelled || w.pruneEvents
}

// tick does maintenance if this worker gets the lock: one round of every step in one
// transaction, then further rounds of the steps whose batch was full, each in its own
// transaction (so no transaction holds more than a batch of row locks), until every step
// has caught up or the budget is spent. held says the worker was the maintainer.
func (m *maintainer) tick(ctx context.Context, rescue bool) (held bool, err error) {
	deadline := time.Now().Add(m.maintenanceBudget())
	work := maintenanceWork{rescue: rescue, promote: true, pruneCompleted: true, pruneDead: true, pruneCancelled: true, pruneEvents: true}
	rescuedAny := false
	for work.any() {
		var full maintenanceWork
		var n int
		held, full, n, err = m.round(ctx, work)
		if err != nil || !held {
			return held, err
		}
		rescuedAny = rescuedAny || n > 0
		work = full
		if work.any() && time.Now().After(deadline) {
			m.fellBehind(work)
			break
		}
	}
	if !work.any() {
		m.behindSince = time.Time{}
	}
	if rescuedAny {
		m.rescued() // rescued jobs are claimable once their transaction has committed
	}
	return held, nil
}

// round runs one batch of each step in work in one transaction under the maintenance
// lock. It reports which batches came back full and how many runs it rescued.
func (m *maintainer) round(ctx context.Context, work maintenanceWork) (held bool, full maintenanceWork, rescued int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Idle-bounded (inHotTx): a maintainer cut off mid-round must not keep the lock, and with it
	// every other worker's rescue, until its network heals.
	err = inHotTx(ctx, m.db, idleTxBound(m.cfg.Lease), func(tx pgx.Tx) error {
		locked, err := m.q.TryMaintenanceLock(ctx, tx)
		if err != nil || !locked {
			return err
		}
		held = true
		if work.rescue {
			rows, err := m.q.RescueExpired(ctx, tx, dbsqlc.RescueExpiredParams{
				Max: RescueBatch, MinUptimeUs: delayOf(m.cfg.Lease)})
			if err != nil {
				return err
			}
			var brk dbsqlc.BreakerRecordParams
			for _, r := range rows {
				m.log.Warn("venturi: rescued a run whose lease expired", "job", ulidOf(r.ID), "kind", r.Kind, "state", r.State)
				if r.Breaker.Valid { // an abandoned run is a failure for its breaker
					brk.Keys = append(brk.Keys, r.Breaker.String)
					brk.Failed = append(brk.Failed, true)
				}
			}
			if len(brk.Keys) > 0 {
				if err := recordBreakers(ctx, tx, m.q, brk, m.log); err != nil {
					return err
				}
			}
			rescued, full.rescue = len(rows), len(rows) == RescueBatch
		}
		if work.promote {
			n, err := m.q.PromoteDue(ctx, tx, PromoteBatch)
			if err != nil {
				return err
			}
			full.promote = n == PromoteBatch
		}
		for _, p := range []struct {
			do    bool
			state dbsqlc.VenturiJobState
			age   time.Duration
			full  *bool
		}{
			{work.pruneCompleted, dbsqlc.VenturiJobStateCompleted, m.cfg.RetainCompleted, &full.pruneCompleted},
			{work.pruneDead, dbsqlc.VenturiJobStateDead, m.cfg.RetainDead, &full.pruneDead},
			{work.pruneCancelled, dbsqlc.VenturiJobStateCancelled, m.cfg.RetainCompleted, &full.pruneCancelled},
		} {
			if !p.do {
				continue
			}
			n, err := m.q.PruneFinished(ctx, tx, dbsqlc.PruneFinishedParams{ // and forgets them in the stats
				State: p.state, AgeUs: delayOf(p.age), Max: PruneBatch})
			if err != nil {
				return err
			}
			*p.full = n == PruneBatch
		}
		if work.pruneEvents {
			// The durable event stream is kept as long as the jobs it describes.
			n, err := m.q.PruneEvents(ctx, tx, dbsqlc.PruneEventsParams{
				AgeUs: delayOf(max(m.cfg.RetainCompleted, m.cfg.RetainDead)), Max: PruneBatch})
			if err != nil {
				return err
			}
			full.pruneEvents = n == PruneBatch
		}
		return nil
	})
	return held, full, rescued, err
}

// fellBehind logs, at most once a minute, that a tick ran out of budget with full batches
// still coming back: retention (or rescue, or promotion) is not keeping pace.
func (m *maintainer) fellBehind(work maintenanceWork) {
	now := time.Now()
	if m.behindSince.IsZero() {
		m.behindSince = now
	}
	if now.Sub(m.lastWarn) < time.Minute {
		return
	}
	m.lastWarn = now
	m.log.Warn("venturi: maintenance is behind: a tick's budget ran out with work left",
		"behind_for", now.Sub(m.behindSince).Round(time.Second), "budget", m.maintenanceBudget(),
		"rescue", work.rescue, "promote", work.promote,
		"prune_completed", work.pruneCompleted, "prune_dead", work.pruneDead)
}
