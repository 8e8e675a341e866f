package venturi

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// maintainer does the schema's housekeeping on one worker at a time (whichever takes the
// maintenance advisory lock in a tick): it rescues runs whose lease expired, promotes
// scheduled jobs that came due, and prunes completed and dead jobs past their retention.
type maintainer struct {
	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	q       *dbsqlc.Queries
	rescued func() // rescued jobs are claimable: look for them
}

// pruneEvery is the shortest interval between two prunes.
const pruneEvery = 30 * time.Second

func (m *maintainer) run(ctx context.Context) {
	t := time.NewTicker(m.cfg.MaintenanceInterval)
	defer t.Stop()
	var lastPrune time.Time
	healthySince := time.Time{} // zero: healthy since start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		prune := time.Since(lastPrune) > pruneEvery
		held, err := m.tick(ctx, healthySince.IsZero() || time.Since(healthySince) >= m.cfg.Lease, prune)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("venturi: maintenance failed", "err", err, "transient", IsTransient(err))
			}
			healthySince = time.Now() // after an outage, give live workers a lease to extend
			continue
		}
		if prune && held {
			lastPrune = time.Now()
		}
	}
}

// tick does one round of maintenance if this worker gets the lock; held says it did.
func (m *maintainer) tick(ctx context.Context, rescue, prune bool) (held bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rescuedAny := false
	err = pgx.BeginFunc(ctx, m.db, func(tx pgx.Tx) error {
		locked, err := m.q.TryMaintenanceLock(ctx, tx)
		if err != nil || !locked {
			return err
		}
		held = true
		if rescue {
			rescued, err := m.q.RescueExpired(ctx, tx, dbsqlc.RescueExpiredParams{
				Max: 1000, MinUptimeUs: delayOf(m.cfg.Lease)})
			if err != nil {
				return err
			}
			for _, r := range rescued {
				m.log.Warn("venturi: rescued a run whose lease expired", "job", ulidOf(r.ID), "kind", r.Kind, "state", r.State)
			}
			rescuedAny = len(rescued) > 0
		}
		if _, err := m.q.PromoteDue(ctx, tx, 1000); err != nil {
			return err
		}
		if prune {
			for state, age := range map[dbsqlc.VenturiJobState]time.Duration{
				dbsqlc.VenturiJobStateCompleted: m.cfg.RetainCompleted,
				dbsqlc.VenturiJobStateDead:      m.cfg.RetainDead,
			} {
				if _, err := m.q.PruneFinished(ctx, tx, dbsqlc.PruneFinishedParams{
					State: state, AgeUs: delayOf(age), Max: 10000}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil && rescuedAny {
		m.rescued() // rescued jobs are claimable once the transaction has committed
	}
	return held, err
}
