package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/pgerr"
)

// PrunerConfig configures a Pruner.
type PrunerConfig struct {
	// Batch is the most jobs, or events, one statement moves or deletes.
	Batch int
	// RetainCompleted is how long completed and cancelled jobs are kept in the history
	// after they finish; negative: not kept (deleted).
	RetainCompleted time.Duration
	// RetainDead is how long dead jobs are kept, as RetainCompleted.
	RetainDead time.Duration
	// CompletedPartition and DeadPartition are the time spans of the partitions the pruner
	// creates in the history's two lanes: completed and cancelled jobs, dead jobs.
	CompletedPartition, DeadPartition time.Duration
	// LockTimeout bounds how long attaching or dropping a partition waits for the history
	// table's lock (a drop locks out the finishes that insert into it meanwhile); a step
	// that times out tries again at the next round.
	LockTimeout time.Duration
	// Logger receives the partitions created and dropped (debug), and a warning when the
	// partitions made ahead do not reach a retention.
	Logger *slog.Logger
}

// A Pruner keeps the history of finished jobs (venturi_job_history): it creates its
// partitions ahead (HistoryExtend), moves the jobs that ended in venturi_job other than
// by a worker's finish into it (SweepEnded), and drops the partitions whose jobs are all
// past their prune time (HistoryDrop), which is retention: no job is deleted row by row.
// It also deletes the events of the durable stream, which are kept as long as the jobs
// they describe (PruneEvents).
type Pruner struct {
	cfg    PrunerConfig    // as given to the constructor
	q      *dbsqlc.Queries // the generated statements
	warned time.Time       // when it last warned that the partitions fall short
}

// A lane of the history: the partitions of one retention (venturi_job_history_completed,
// venturi_job_history_dead), each as wide as the lane asks.
type lane struct {
	id     int16         // venturi_job_history.lane
	name   string        // for logs
	retain time.Duration // how long its jobs are kept; negative: not kept
	width  time.Duration // the span of its partitions
}

// lanes are the history's lanes that keep jobs.
func (p *Pruner) lanes() []lane {
	var out []lane
	for _, l := range []lane{
		{1, "completed", p.cfg.RetainCompleted, p.cfg.CompletedPartition},
		{2, "dead", p.cfg.RetainDead, p.cfg.DeadPartition},
	} {
		if l.retain >= 0 {
			out = append(out, l)
		}
	}
	return out
}

// NewPruner returns a pruner that runs q's statements.
func NewPruner(cfg PrunerConfig, q *dbsqlc.Queries) *Pruner {
	return &Pruner{cfg: cfg, q: q}
}

// Steps are the pruner's steps of the retention duty: partitions ahead, the sweep of
// ended jobs, the drop of due partitions (one a batch), then events, then finished
// workflows.
func (p *Pruner) Steps() []Step {
	return []Step{
		{Name: "history_extend", Batch: 1, Do: p.Extend},
		{Name: "sweep_ended", Batch: p.cfg.Batch, Do: p.SweepEnded},
		{Name: "history_drop", Batch: 1, Do: p.DropDue},
		{Name: "prune_events", Batch: p.cfg.Batch, Do: p.PruneEvents},
		{Name: "prune_workflows", Batch: p.cfg.Batch, Do: p.PruneWorkflows},
	}
}

// ahead is how far ahead of now a lane's partitions must reach: its retention plus two
// partitions.
func (l lane) ahead() time.Duration { return l.retain + 2*l.width }

// Extend creates, in tx, the partitions of each lane that keeps jobs that do not reach
// its retention plus two partitions yet, and returns 0 (its work is never left over). A
// lock timeout (another transaction held the lane's table too long) leaves the lane to
// the next round.
func (p *Pruner) Extend(ctx context.Context, tx pgx.Tx) (int, error) {
	for _, l := range p.lanes() {
		var created int32
		err := pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) (err error) { // a savepoint: a failure undoes this lane only
			created, err = p.q.HistoryExtend(ctx, tx, dbsqlc.HistoryExtendParams{Lane: l.id,
				WidthUs: micros(l.width), AheadUs: micros(l.ahead()), LockTimeoutMs: millis(p.cfg.LockTimeout)})
			return err
		})
		switch {
		case pgerr.Code(err) == pgerr.LockNotAvailable:
			p.cfg.Logger.Debug("venturi: history partitions: lock timeout; next round", "lane", l.name, "err", err)
			if err := p.warnIfShort(ctx, tx, l); err != nil {
				return 0, err
			}
		case err != nil:
			return 0, err
		case created > 0:
			p.cfg.Logger.Debug("venturi: history partitions created", "lane", l.name, "partitions", created, "span", l.width)
		}
	}
	return 0, nil
}

// warnIfShort warns (at most every ten minutes) when lane l's partitions do not reach its
// retention: jobs that end now would be pruned sooner than asked.
func (p *Pruner) warnIfShort(ctx context.Context, tx pgx.Tx, l lane) error {
	h, err := p.q.HistoryHorizon(ctx, tx, l.id)
	if err != nil {
		return err
	}
	if h.AheadUs < micros(l.retain) && time.Since(p.warned) > 10*time.Minute {
		p.warned = time.Now()
		p.cfg.Logger.Warn("venturi: the history's partitions do not reach the retention: jobs that end now are pruned sooner",
			"lane", l.name, "horizon", h.Horizon, "retention", l.retain)
	}
	return nil
}

// SweepEnded moves, in tx, a batch of the jobs that ended in venturi_job into the history
// (or deletes those kept for no time or already past their prune time), and returns how
// many left venturi_job.
func (p *Pruner) SweepEnded(ctx context.Context, tx pgx.Tx) (int, error) {
	r, err := p.q.SweepEnded(ctx, tx, dbsqlc.SweepEndedParams{Max: int32(p.cfg.Batch),
		RetainCompletedUs: dbsqlc.RetainUs(p.cfg.RetainCompleted), RetainDeadUs: dbsqlc.RetainUs(p.cfg.RetainDead)})
	if err != nil {
		return 0, err
	}
	return int(r.Ended), nil
}

// DropDue drops, in tx, the oldest partition whose jobs are all past their prune time
// (taking them out of the stats), and returns 1 if it dropped one (so that the round
// repeats while more are due), 0 otherwise. A lock timeout leaves it to the next round.
func (p *Pruner) DropDue(ctx context.Context, tx pgx.Tx) (int, error) {
	var dropped string
	err := pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) (err error) { // a savepoint: a failure undoes this step only
		dropped, err = p.q.HistoryDrop(ctx, tx, millis(p.cfg.LockTimeout))
		return err
	})
	switch {
	case pgerr.Code(err) == pgerr.LockNotAvailable:
		p.cfg.Logger.Debug("venturi: history partition drop: lock timeout; next round", "err", err)
		return 0, nil
	case err != nil:
		return 0, err
	case dropped == "":
		return 0, nil
	}
	p.cfg.Logger.Debug("venturi: history partition dropped", "partition", dropped)
	return 1, nil
}

// PruneEvents deletes, in tx, a batch of events older than the longer of the two
// retentions, and returns how many it deleted.
func (p *Pruner) PruneEvents(ctx context.Context, tx pgx.Tx) (int, error) {
	n, err := p.q.PruneEvents(ctx, tx, dbsqlc.PruneEventsParams{
		AgeUs: micros(max(p.cfg.RetainCompleted, p.cfg.RetainDead, 0)), Max: int32(p.cfg.Batch)})
	return int(n), err
}

// PruneWorkflows deletes, in tx, a batch of finished workflows (their nodes and outputs
// with them): a succeeded one kept as long as completed jobs, a failed or cancelled one
// as long as dead jobs, so that a failed workflow can be retried while its failed jobs
// are kept. A retention that keeps no jobs (negative: Discard) keeps a finished workflow
// DiscardedWorkflowKeep, so that its outcome can still be read and awaited. It returns
// how many it deleted.
func (p *Pruner) PruneWorkflows(ctx context.Context, tx pgx.Tx) (int, error) {
	keep := func(d time.Duration) int64 {
		if d < 0 {
			return micros(DiscardedWorkflowKeep)
		}
		return micros(d)
	}
	n, err := p.q.PruneWorkflows(ctx, tx, dbsqlc.PruneWorkflowsParams{
		CompletedUs: keep(p.cfg.RetainCompleted), DeadUs: keep(p.cfg.RetainDead), Max: int32(p.cfg.Batch)})
	return int(n), err
}

// DiscardedWorkflowKeep is how long a finished workflow is kept when the retention of its
// jobs keeps none.
const DiscardedWorkflowKeep = time.Hour

// millis is d in whole milliseconds, at least 1.
func millis(d time.Duration) int32 {
	return int32(max(d.Milliseconds(), 1))
}

// OrphanSweeperConfig configures an OrphanSweeper.
type OrphanSweeperConfig struct {
	// Batch is the most jobs one statement of the sweep reads.
	Batch int
	// Every is how long after a pass over the four tables the next one starts (at least
	// the maintenance interval).
	Every time.Duration
	// Logger receives a debug line for every batch that deleted rows.
	Logger *slog.Logger
}

// An OrphanSweeper deletes what jobs that are gone left behind: the journal entries moved
// out of their rows, their signals, hooks and memoized steps, once the job is in neither
// venturi_job nor venturi_job_history (deleted by an operator, discarded as it ended, or
// pruned with its partition). A pass is a keyset sweep of each table in job order, a
// batch per statement. An OrphanSweeper is used by one goroutine at a time.
type OrphanSweeper struct {
	cfg   OrphanSweeperConfig // as given to the constructor
	q     *dbsqlc.Queries     // the generated statements
	table int                 // the table the pass is in (index into orphanSweeps)
	after string              // the pass goes on in that table after this job ID
	next  time.Time           // when the next pass starts
}

// orphanSweeps are the four tables' sweep statements, in the order of a pass.
var orphanSweeps = []struct {
	name  string
	sweep func(q *dbsqlc.Queries, ctx context.Context, db dbsqlc.DBTX, after pgtype.UUID, max int32) (scanned, deleted int32, last string, err error)
}{
	{"journal", func(q *dbsqlc.Queries, ctx context.Context, db dbsqlc.DBTX, after pgtype.UUID, max int32) (int32, int32, string, error) {
		r, err := q.SweepOrphanJournal(ctx, db, dbsqlc.SweepOrphanJournalParams{After: after, Max: max})
		return r.Scanned, r.Deleted, r.LastJob, err
	}},
	{"signals", func(q *dbsqlc.Queries, ctx context.Context, db dbsqlc.DBTX, after pgtype.UUID, max int32) (int32, int32, string, error) {
		r, err := q.SweepOrphanSignals(ctx, db, dbsqlc.SweepOrphanSignalsParams{After: after, Max: max})
		return r.Scanned, r.Deleted, r.LastJob, err
	}},
	{"hooks", func(q *dbsqlc.Queries, ctx context.Context, db dbsqlc.DBTX, after pgtype.UUID, max int32) (int32, int32, string, error) {
		r, err := q.SweepOrphanHooks(ctx, db, dbsqlc.SweepOrphanHooksParams{After: after, Max: max})
		return r.Scanned, r.Deleted, r.LastJob, err
	}},
	{"steps", func(q *dbsqlc.Queries, ctx context.Context, db dbsqlc.DBTX, after pgtype.UUID, max int32) (int32, int32, string, error) {
		r, err := q.SweepOrphanSteps(ctx, db, dbsqlc.SweepOrphanStepsParams{After: after, Max: max})
		return r.Scanned, r.Deleted, r.LastJob, err
	}},
}

// NewOrphanSweeper returns a sweeper that runs q's statements.
func NewOrphanSweeper(cfg OrphanSweeperConfig, q *dbsqlc.Queries) *OrphanSweeper {
	return &OrphanSweeper{cfg: cfg, q: q}
}

// Step is the sweeper as the step of a duty of its own.
func (o *OrphanSweeper) Step() Step {
	return Step{Name: "sweep_orphans", Batch: o.cfg.Batch, Do: o.RunOnce}
}

// Due reports whether a pass is under way or due to start.
func (o *OrphanSweeper) Due() bool { return !time.Now().Before(o.next) }

// Swept records the end of a tick of the sweep's duty (err: its error): once a pass
// reached its end, or failed, or another worker had the lock, the next one starts later.
func (o *OrphanSweeper) Swept(err error) {
	if (o.table == 0 && o.after == "") || err != nil {
		o.next = time.Now().Add(o.cfg.Every)
	}
}

// RunOnce sweeps the next batch of the pass in tx and returns how many jobs it read; a
// pass is over when it returns less than a batch from the last table.
func (o *OrphanSweeper) RunOnce(ctx context.Context, tx pgx.Tx) (int, error) {
	s := orphanSweeps[o.table]
	after := pgtype.UUID{Valid: true} // the zero UUID: from the start
	if o.after != "" {
		if err := after.Scan(o.after); err != nil {
			return 0, err
		}
	}
	scanned, deleted, last, err := s.sweep(o.q, ctx, tx, after, int32(o.cfg.Batch))
	if err != nil {
		return 0, err
	}
	if deleted > 0 {
		o.cfg.Logger.Debug("venturi: deleted what gone jobs left", "table", s.name, "rows", deleted)
	}
	if int(scanned) < o.cfg.Batch { // this table is done: the next one, or the pass is over
		o.table, o.after = (o.table+1)%len(orphanSweeps), ""
		if o.table != 0 {
			return o.cfg.Batch, nil // a full batch: the round goes on with the next table
		}
		return int(scanned), nil
	}
	o.after = last
	return int(scanned), nil
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
