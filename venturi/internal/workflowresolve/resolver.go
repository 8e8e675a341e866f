// Package workflowresolve is the worker's workflow resolver: it settles the changes of
// workflows' jobs that the transactions making them did not settle themselves (an older
// worker's finish, a rescue, a cancel, a delete, a retry), woken by the notification the
// inbox trigger sends and, as a safety net, on a timer.
//
// venturi_workflow_resolve skips workflows another transaction holds, so every worker
// runs a resolver and none waits for another.
package workflowresolve

import (
	"context"
	"log/slog"
	"time"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/lograte"
)

// PerPass is the most workflows one statement settles.
const PerPass = 64

// DB runs the resolver's statements (the worker's control pool).
type DB = dbsqlc.DBTX

// Resolver settles workflows' unsettled changes. Make one with New, run it with Run and
// wake it with Wake.
type Resolver struct {
	db       DB
	q        *dbsqlc.Queries
	channel  string // the jobs' channel, told of released jobs
	interval time.Duration
	log      *slog.Logger
	stop     func(context.Context) (int, error)
	wake     chan struct{}

	// While the database is gone every pass fails: each warning is limited.
	settleLog, stopLog lograte.Limiter
}

// New returns a resolver that settles through db, tells released jobs' kinds on channel
// ("" for none), and passes every interval when nothing wakes it. After each pass it
// calls stop, which cancels the released jobs of the workflows being cancelled (a
// fail-fast trips in a settle, which cannot stop a running job) and returns how many.
func New(db DB, q *dbsqlc.Queries, channel string, interval time.Duration, log *slog.Logger,
	stop func(context.Context) (int, error)) *Resolver {
	return &Resolver{db: db, q: q, channel: channel, interval: interval, log: log, stop: stop, wake: make(chan struct{}, 1)}
}

// Wake asks for a pass (a notification on the workflow channel arrived).
func (r *Resolver) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run passes until ctx ends: once at start, on every Wake, and every interval.
func (r *Resolver) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		r.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// Pass settles workflows until a statement finds nothing to apply (at most 100
// statements, then the next wake or tick goes on), then stops the released jobs of the
// workflows being cancelled. It returns the inbox rows applied.
func (r *Resolver) Pass(ctx context.Context) int {
	n := r.settle(ctx)
	if r.stop != nil {
		if _, err := r.stop(ctx); err != nil && ctx.Err() == nil {
			r.stopLog.Warn(r.log, "venturi: cancel the jobs of cancelled workflows", "err", err)
		} else if err == nil {
			r.stopLog.OK()
		}
	}
	return n
}

func (r *Resolver) settle(ctx context.Context) int {
	total := 0
	for range 100 {
		n, err := r.q.ResolveWorkflows(ctx, r.db, dbsqlc.ResolveWorkflowsParams{Channel: r.channel, Max: PerPass})
		if err != nil {
			if ctx.Err() == nil {
				r.settleLog.Warn(r.log, "venturi: settle workflows", "err", err)
			}
			return total
		}
		r.settleLog.OK()
		total += int(n)
		if n == 0 {
			return total
		}
	}
	return total
}
