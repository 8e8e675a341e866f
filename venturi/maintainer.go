package venturi

import (
	"context"
	"fmt"
	"log/slog"
	"time"

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
	// PruneBatch is the most ended jobs one statement of the retention duty moves into
	// the history of finished jobs (or deletes), and the most events one deletes.
	PruneBatch = 5000
)

// OrphanSweepBatch is the most jobs one statement of the orphan sweep reads (journal
// entries, signals, hooks and steps of jobs that are gone), and OrphanSweepEvery how long
// after one pass over them the next starts.
const (
	OrphanSweepBatch = 1000
	OrphanSweepEvery = time.Minute
)

// historyLockTimeout bounds how long attaching or dropping a history partition waits for
// the history table's lock, during which the finishes that insert into it wait too.
const historyLockTimeout = 200 * time.Millisecond

// GateSweepBatch is the most gates one statement of the idle gates' sweep reads.
const GateSweepBatch = 1000

// maintainer does the schema's housekeeping in three duties, each done by one worker at a
// time (whichever takes the duty's transaction-scoped advisory lock in a tick), so that no
// duty waits for another:
//
//   - leases and due work (the maintenance lock), every Config.MaintenanceInterval: it
//     rescues runs whose lease expired and promotes scheduled jobs that came due;
//   - retention (the retention lock), on a loop of its own at the same interval: it
//     creates the history's partitions ahead, moves the jobs that ended in venturi_job
//     other than by a finish into the history, drops the history's partitions past
//     their retention, prunes events, sweeps the gates nothing uses (rate windows and
//     breakers idle for Config.RetainIdleGates) and what gone jobs left (journal
//     entries, signals, hooks, steps);
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
	pruner := newPruner(cfg, log, q)
	orphans := maintenance.NewOrphanSweeper(maintenance.OrphanSweeperConfig{
		Batch: OrphanSweepBatch, Every: max(OrphanSweepEvery, cfg.MaintenanceInterval), Logger: log}, q)
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
	}, q, rescuer, promoter, pruner, sweeper, orphans)
	return m
}

// newPruner returns the retention duty's pruner (internal/maintenance): the retentions of
// cfg, each lane's partitions as wide as cfg.historyPartition says for its retention.
func newPruner(cfg Config, log *slog.Logger, q *dbsqlc.Queries) *maintenance.Pruner {
	return maintenance.NewPruner(maintenance.PrunerConfig{
		Batch: PruneBatch, RetainCompleted: cfg.RetainCompleted, RetainDead: cfg.RetainDead,
		CompletedPartition: cfg.historyPartition(cfg.RetainCompleted), DeadPartition: cfg.historyPartition(cfg.RetainDead),
		LockTimeout: historyLockTimeout, Logger: log}, q)
}

// run does the maintainer's duties until ctx ends: the maintenance loops, and cron beside
// them (cronservice.go).
func (m *maintainer) run(ctx context.Context) {
	defer m.startCron(ctx)() // durable cron: fires due schedules beside the ticks
	m.loops.Run(ctx)
}

// ensureHistory creates the history partitions that the jobs the worker's runs end need,
// before its first run: the retention duty keeps them ahead from then on.
func ensureHistory(ctx context.Context, cfg Config, log *slog.Logger, db *pgxpool.Pool, q *dbsqlc.Queries) error {
	p := newPruner(cfg, log, q)
	err := inHotTx(ctx, db, idleTxBound(cfg.Lease), func(tx pgx.Tx) error {
		_, err := p.Extend(ctx, tx)
		return err
	})
	if err != nil {
		return fmt.Errorf("venturi: history partitions: %w", err)
	}
	return nil
}
