package venturi

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
	"github.com/venturi-dev/venturi/internal/leases"
)

// leaseRuns is the run tracker as the lease extender's tracker (internal/leases): the
// extender calls it from its one goroutine, once or twice per tick. It keeps the runs of
// the last Leased until Extended reports their result.
type leaseRuns struct {
	tracker *jobrun.Tracker
	runs    []*jobrun.Job // the runs the last Leased returned
}

// newLeaseExtender returns the worker's lease extender over tracker, sending through db's
// sendIndexed.
func newLeaseExtender(cfg Config, log *slog.Logger, db *pgxpool.Pool, tracker *jobrun.Tracker) *leases.Extender {
	return leases.NewExtender(leases.Config{
		Lease: cfg.Lease, JobTimeout: cfg.JobTimeout, Logger: log, Tracker: &leaseRuns{tracker: tracker},
		Send: func(ctx context.Context, queue func(*pgx.Batch)) error { return sendIndexed(ctx, db, queue) },
	})
}

// Leased implements leases.Tracker: the tracker's leased runs, in ID order.
func (l *leaseRuns) Leased(p *dbsqlc.ExtendLeasesParams) {
	l.runs = l.tracker.Leased()
	for _, j := range l.runs {
		p.Ids = append(p.Ids, uuidOf(j.ID))
		p.Tokens = append(p.Tokens, j.Token)
	}
}

// Extended implements leases.Tracker: the tracker records the result for the last
// Leased's runs.
func (l *leaseRuns) Extended(found map[ulid.ULID]bool, sent time.Time) {
	l.tracker.Extended(l.runs, found, sent)
	l.runs = nil
}

// RequestStop implements leases.Tracker.
func (l *leaseRuns) RequestStop(id ulid.ULID, ev string) { l.tracker.RequestStop(id, ev) }

// Enforce implements leases.Tracker.
func (l *leaseRuns) Enforce(margin, jobTimeout time.Duration) { l.tracker.Enforce(margin, jobTimeout) }
