package venturi

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// leaseExtender extends the leases of every job the worker holds (running or buffered)
// in one statement per tick (every Lease/3), and cancels the handlers whose lease is
// lost, would expire unextended, or ran past JobTimeout.
type leaseExtender struct {
	cfg     Config
	log     *slog.Logger
	db      *pgxpool.Pool
	q       *dbsqlc.Queries
	tracker *runTracker
}

func (l *leaseExtender) run(ctx context.Context) {
	every := l.cfg.Lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.extend(ctx)
		l.tracker.enforce(every/2, l.cfg.JobTimeout)
	}
}

func (l *leaseExtender) extend(ctx context.Context) {
	runs := l.tracker.leased()
	if len(runs) == 0 {
		return
	}
	p := dbsqlc.ExtendLeasesParams{LeaseUs: delayOf(l.cfg.Lease)}
	for _, j := range runs {
		p.Ids = append(p.Ids, uuidOf(j.id))
		p.Tokens = append(p.Tokens, j.token)
	}
	sent := time.Now()
	// The statement may take up to half a lease (a loaded server, a pool wait); a later
	// tick or the self-fencing in enforce covers what it could not extend.
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Lease/2)
	var kept []*dbsqlc.ExtendLeasesRow
	err := sendIndexed(cctx, l.db, func(b *pgx.Batch) {
		dbsqlc.QueueExtendLeases(b, p, func(r *dbsqlc.ExtendLeasesRow) { kept = append(kept, r) })
	})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("venturi: lease extension failed", "err", err, "runs", len(runs), "transient", IsTransient(err))
		}
		return
	}
	ok := make(map[ulid.ULID]bool, len(kept))
	for _, r := range kept {
		ok[ulidOf(r.ID)] = true
		if r.StopEvent != "" { // the notification may have been missed
			l.tracker.requestStop(ulidOf(r.ID), Event(r.StopEvent))
		}
	}
	l.tracker.extended(runs, ok, sent)
}
