package venturi

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi/internal/completer"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/maintenance"
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

// GateSweepBatch is the most gates one statement of the idle gates' sweep reads.
const GateSweepBatch = 1000

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
//     (maintenance.Sampler).
//
// The services and their loops live in internal/maintenance (maintenance.Maintainer); the
// maintainer translates Config into their configs, and keeps the cron firer's start.
type maintainer struct {
	cfg   Config
	log   *slog.Logger
	db    *pgxpool.Pool
	q     *dbsqlc.Queries
	loops *maintenance.Maintainer
}

// newMaintainer returns the maintainer of the schema db's search path names; rescued is
// called when rescued jobs became claimable.
func newMaintainer(cfg Config, log *slog.Logger, db *pgxpool.Pool, q *dbsqlc.Queries, rescued func()) *maintainer {
	m := &maintainer{cfg: cfg, log: log, db: db, q: q}
	rescuer := maintenance.NewRescuer(maintenance.RescuerConfig{
		Batch: RescueBatch, Lease: cfg.Lease, Logger: log,
		RecordBreakers: func(ctx context.Context, tx pgx.Tx, p dbsqlc.BreakerRecordParams) error {
			return completer.RecordBreakers(ctx, tx, q, p, log)
		},
	}, q)
	promoter := maintenance.NewPromoter(maintenance.PromoterConfig{Batch: PromoteBatch}, q)
	pruner := maintenance.NewPruner(maintenance.PrunerConfig{
		Batch: PruneBatch, RetainCompleted: cfg.RetainCompleted, RetainDead: cfg.RetainDead}, q)
	sweeper := maintenance.NewGateSweeper(maintenance.GateSweeperConfig{
		Batch: GateSweepBatch, RetainIdleGates: cfg.RetainIdleGates, Interval: cfg.MaintenanceInterval, Logger: log}, q)
	sampler := maintenance.NewSampler(maintenance.SamplerConfig{
		Interval: cfg.StatsInterval, ID: cfg.ID, Logger: log,
		InTx: func(ctx context.Context, fn func(pgx.Tx) error) error {
			return inTx(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, idleTxBound(cfg.Lease), fn)
		},
	}, q)
	m.loops = maintenance.NewMaintainer(maintenance.MaintainerConfig{
		Interval: cfg.MaintenanceInterval, Lease: cfg.Lease,
		// Idle-bounded (inHotTx): a maintainer cut off mid-round must not keep the lock, and
		// with it every other worker's rescue, until its network heals.
		InTx: func(ctx context.Context, fn func(pgx.Tx) error) error {
			return inHotTx(ctx, db, idleTxBound(cfg.Lease), fn)
		},
		OnRescued:      rescued,
		AfterRetention: sampler.SampleIfDue,
		Logger:         log,
	}, q, rescuer, promoter, pruner, sweeper)
	return m
}

// run does the maintainer's duties until ctx ends: the maintenance loops, and cron beside
// them (cronservice.go).
func (m *maintainer) run(ctx context.Context) {
	defer m.startCron(ctx)() // durable cron: fires due schedules beside the ticks
	m.loops.Run(ctx)
}
