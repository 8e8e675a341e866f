package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/lograte"
	"github.com/venturi-dev/venturi/internal/pgerr"
)

// MaintainerConfig configures a Maintainer.
type MaintainerConfig struct {
	// Interval is how often each loop ticks.
	Interval time.Duration
	// Lease is the workers' lease: after a failed tick, rescue waits this long so that
	// live workers can extend their leases first.
	Lease time.Duration
	// InTx runs the duties' transactions.
	InTx TxFunc
	// OnRescued is called after a tick that rescued runs, once its transaction committed:
	// the rescued jobs are claimable.
	OnRescued func()
	// AfterRetention is called at the end of every tick of the retention loop (the stats
	// sample). Nil: nothing.
	AfterRetention func(ctx context.Context)
	// Logger receives the failures of the ticks.
	Logger *slog.Logger
}

// A Maintainer runs the maintenance duties on two loops, so that no duty waits for
// another:
//
//   - leases and due work, under the maintenance lock: rescue (Rescuer) and promotion
//     (Promoter) in one transaction;
//   - retention, under the retention lock: the Pruner's steps, then, when due, the
//     GateSweeper's in transactions of their own (they hold every gate stripe, which the
//     gated claims take), then, when due, the minute's sweeps (the OrphanSweeper's and the
//     Promoter's placement of unplaced gated jobs), then AfterRetention.
//
// A prune waits for a stats sample in progress, and a sample of a large table takes
// seconds: neither may hold up rescue, so rescue and promotion share neither a lock, a
// transaction nor a goroutine with them.
type Maintainer struct {
	cfg       MaintainerConfig // as given to the constructor
	rescuer   *Rescuer         // counts what the leases duty rescued
	sweeper   *GateSweeper     // says when the gates duty is due
	orphans   *OrphanSweeper   // says when the sweeps duty is due
	leases    *Duty            // rescue and promotion
	retention *Duty            // pruning
	gates     *Duty            // the idle gates' sweep
	orphaned  *Duty            // the minute's sweeps: what gone jobs left, unplaced gated jobs

	// While the database is gone every tick fails: each loop's warnings are limited.
	leasesLog, retentionLog, gatesLog, orphanedLog lograte.Limiter
}

// NewMaintainer returns a maintainer of the duties made of the services given, which
// take their locks through q.
func NewMaintainer(cfg MaintainerConfig, q *dbsqlc.Queries, rescuer *Rescuer, promoter *Promoter, pruner *Pruner, sweeper *GateSweeper, orphans *OrphanSweeper) *Maintainer {
	budget := Budget(cfg.Interval)
	duty := func(name string, lock LockFunc, steps ...Step) *Duty {
		return NewDuty(DutyConfig{Name: name, Lock: lock, Steps: steps, Budget: budget, InTx: cfg.InTx, Logger: cfg.Logger})
	}
	return &Maintainer{cfg: cfg, rescuer: rescuer, sweeper: sweeper, orphans: orphans,
		leases:    duty("leases", q.TryMaintenanceLock, rescuer.Step(), promoter.Step()),
		retention: duty("retention", q.TryRetentionLock, pruner.Steps()...),
		gates:     duty("gates", q.TryRetentionLock, sweeper.Step()),
		orphaned:  duty("sweeps", q.TryRetentionLock, orphans.Step(), promoter.PlaceStep()),
	}
}

// Run runs both loops until ctx ends, and returns when both have.
func (m *Maintainer) Run(ctx context.Context) {
	retained := make(chan struct{})
	go func() { defer close(retained); m.runRetention(ctx) }()
	defer func() { <-retained }()
	m.runLeases(ctx)
}

// runLeases rescues and promotes every Interval until ctx ends.
func (m *Maintainer) runLeases(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	healthySince := time.Time{} // zero: healthy since start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rescue := healthySince.IsZero() || time.Since(healthySince) >= m.cfg.Lease
		m.rescuer.TakeRescued()
		_, err := m.leases.Tick(ctx, []bool{rescue, true})
		if m.rescuer.TakeRescued() > 0 {
			m.cfg.OnRescued() // rescued jobs are claimable once their transaction has committed
		}
		if err != nil {
			if ctx.Err() == nil {
				m.leasesLog.Warn(m.cfg.Logger, "venturi: maintenance failed", "err", err, "transient", pgerr.IsTransient(err))
			}
			healthySince = time.Now() // after an outage, give live workers a lease to extend
		} else {
			m.leasesLog.OK()
		}
	}
}

// runRetention prunes, sweeps idle gates when due, and calls AfterRetention every
// Interval until ctx ends.
func (m *Maintainer) runRetention(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := m.retention.TickAll(ctx); err != nil && ctx.Err() == nil {
			m.retentionLog.Warn(m.cfg.Logger, "venturi: retention failed", "err", err, "transient", pgerr.IsTransient(err))
		} else if err == nil {
			m.retentionLog.OK()
		}
		if m.sweeper.Due() {
			_, err := m.gates.TickAll(ctx)
			if err != nil && ctx.Err() == nil {
				m.gatesLog.Warn(m.cfg.Logger, "venturi: pruning idle gates failed", "err", err, "transient", pgerr.IsTransient(err))
			} else if err == nil {
				m.gatesLog.OK()
			}
			m.sweeper.Swept(err) // swept (or another worker sweeps, or it failed): later
		}
		if m.orphans.Due() {
			_, err := m.orphaned.TickAll(ctx)
			if err != nil && ctx.Err() == nil {
				m.orphanedLog.Warn(m.cfg.Logger, "venturi: the sweeps of what gone jobs left and of unplaced gated jobs failed", "err", err, "transient", pgerr.IsTransient(err))
			} else if err == nil {
				m.orphanedLog.OK()
			}
			m.orphans.Swept(err)
		}
		if m.cfg.AfterRetention != nil {
			m.cfg.AfterRetention(ctx)
		}
	}
}
