package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// PrunerConfig configures a Pruner.
type PrunerConfig struct {
	// Batch is the most jobs, or events, one statement deletes.
	Batch int
	// RetainCompleted is how long completed and cancelled jobs are kept after they finish.
	RetainCompleted time.Duration
	// RetainDead is how long dead jobs are kept after they finish.
	RetainDead time.Duration
}

// A Pruner deletes finished jobs past their retention, and forgets them in the stats
// (PruneFinished), and the events of the durable stream, which are kept as long as the
// jobs they describe (PruneEvents).
type Pruner struct {
	cfg PrunerConfig    // as given to the constructor
	q   *dbsqlc.Queries // the generated statements
}

// NewPruner returns a pruner that runs q's statements.
func NewPruner(cfg PrunerConfig, q *dbsqlc.Queries) *Pruner {
	return &Pruner{cfg: cfg, q: q}
}

// Steps are the pruner's steps of the retention duty: completed, dead and cancelled jobs,
// then events.
func (p *Pruner) Steps() []Step {
	return []Step{
		{Name: "prune_completed", Batch: p.cfg.Batch, Do: p.pruneJobs(dbsqlc.VenturiJobStateCompleted, p.cfg.RetainCompleted)},
		{Name: "prune_dead", Batch: p.cfg.Batch, Do: p.pruneJobs(dbsqlc.VenturiJobStateDead, p.cfg.RetainDead)},
		{Name: "prune_cancelled", Batch: p.cfg.Batch, Do: p.pruneJobs(dbsqlc.VenturiJobStateCancelled, p.cfg.RetainCompleted)},
		{Name: "prune_events", Batch: p.cfg.Batch, Do: p.PruneEvents},
	}
}

// pruneJobs returns the step that deletes a batch of jobs in state finished more than age
// ago, and forgets them in the stats.
func (p *Pruner) pruneJobs(state dbsqlc.VenturiJobState, age time.Duration) func(context.Context, pgx.Tx) (int, error) {
	return func(ctx context.Context, tx pgx.Tx) (int, error) {
		return p.PruneJobs(ctx, tx, state, age)
	}
}

// PruneJobs deletes, in tx, a batch of jobs in state finished more than age ago, forgets
// them in the stats, and returns how many it deleted.
func (p *Pruner) PruneJobs(ctx context.Context, tx pgx.Tx, state dbsqlc.VenturiJobState, age time.Duration) (int, error) {
	n, err := p.q.PruneFinished(ctx, tx, dbsqlc.PruneFinishedParams{State: state, AgeUs: micros(age), Max: int32(p.cfg.Batch)})
	return int(n), err
}

// PruneEvents deletes, in tx, a batch of events older than the longer of the two
// retentions, and returns how many it deleted.
func (p *Pruner) PruneEvents(ctx context.Context, tx pgx.Tx) (int, error) {
	n, err := p.q.PruneEvents(ctx, tx, dbsqlc.PruneEventsParams{
		AgeUs: micros(max(p.cfg.RetainCompleted, p.cfg.RetainDead)), Max: int32(p.cfg.Batch)})
	return int(n), err
}

// GateSweeperConfig configures a GateSweeper.
type GateSweeperConfig struct {
	// Batch is the most gates one statement of the sweep reads.
	Batch int
	// RetainIdleGates is how long a gate (a rate window, a breaker) may sit unused before
	// the sweep deletes it.
	RetainIdleGates time.Duration
	// Interval is the maintenance interval: a sweep that reached the end starts again a
	// quarter of RetainIdleGates later, but never sooner than one interval.
	Interval time.Duration
	// Logger receives a debug line for every batch that deleted gates.
	Logger *slog.Logger
}

// A GateSweeper deletes the gates nothing uses: a keyset sweep over venturi_gate in key
// order, a batch per statement, each under every gate stripe (LockGateStripes), which
// the gated claims take. A GateSweeper is used by one goroutine at a time.
type GateSweeper struct {
	cfg   GateSweeperConfig // as given to the constructor
	q     *dbsqlc.Queries   // the generated statements
	after string            // the sweep goes on after this key ("": from the start)
	next  time.Time         // when the next sweep starts
}

// NewGateSweeper returns a sweeper that runs q's statements.
func NewGateSweeper(cfg GateSweeperConfig, q *dbsqlc.Queries) *GateSweeper {
	return &GateSweeper{cfg: cfg, q: q}
}

// Step is the sweeper as the step of a duty of its own (its transactions hold every gate
// stripe).
func (g *GateSweeper) Step() Step {
	return Step{Name: "prune_idle_gates", Batch: g.cfg.Batch, Do: g.RunOnce}
}

// Due reports whether a sweep is under way or due to start.
func (g *GateSweeper) Due() bool { return !time.Now().Before(g.next) }

// Swept records the end of a tick of the sweep's duty (err: its error): once the sweep
// reached the end, or failed, or another worker had the lock, the next one starts later.
func (g *GateSweeper) Swept(err error) {
	if g.after == "" || err != nil {
		g.next = time.Now().Add(max(g.cfg.RetainIdleGates/4, g.cfg.Interval))
	}
}

// RunOnce sweeps the next batch of gates in key order in tx, deleting the idle ones
// (PruneIdleGates), and returns how many gates it read.
func (g *GateSweeper) RunOnce(ctx context.Context, tx pgx.Tx) (int, error) {
	if err := g.q.LockGateStripes(ctx, tx); err != nil {
		return 0, err
	}
	r, err := g.q.PruneIdleGates(ctx, tx, dbsqlc.PruneIdleGatesParams{
		After: g.after, Max: int32(g.cfg.Batch), IdleUs: micros(g.cfg.RetainIdleGates)})
	if err != nil {
		return 0, err
	}
	if r.Deleted > 0 {
		g.cfg.Logger.Debug("venturi: pruned idle gates", "gates", r.Deleted)
	}
	g.after = r.LastKey
	if int(r.Scanned) < g.cfg.Batch {
		g.after = "" // the sweep reached the end
	}
	return int(r.Scanned), nil
}
