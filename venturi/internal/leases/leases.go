// Package leases holds venturi's lease extender ([Extender]): the worker's service that
// extends the leases of every job the worker holds (running or buffered) in one statement
// per tick, and has the runs whose lease is lost, would expire unextended, or ran past
// JobTimeout cancelled.
//
// The extender knows nothing of package venturi: the runs it extends live in the worker's
// run tracker (internal/jobrun), which it reaches through the small [Tracker] interface
// the root implements (called once or twice per tick, never per job), and it sends its statement with a [SendFunc] the worker
// gives it. It imports only internal packages (internal/dbsqlc, internal/pgerr).
package leases

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/pgerr"
)

// Tracker is what the extender needs of the runs a worker holds. Its methods are called
// from the extender's goroutine only, a few times per tick.
type Tracker interface {
	// Leased appends to p.Ids and p.Tokens the job ID and lease token of every run whose
	// lease is to be extended, in ID order (the lock order of the statements that take
	// them). It leaves them empty when there is none.
	Leased(p *dbsqlc.ExtendLeasesParams)
	// Extended records the result of the extension sent at sent for the runs the last
	// Leased returned. found holds the IDs whose job still holds the run's token: true
	// when the lease now ends a lease after sent, false when another transaction held the
	// job's row and the lease was not extended this time (the lease it had still stands).
	// The others were fenced: their token no longer matches.
	Extended(found map[ulid.ULID]bool, sent time.Time)
	// RequestStop reports that the extension found id's run asked to stop (ev: the job's
	// stop_event, "replaced" or "cancelled"): its notification may have been missed.
	RequestStop(id ulid.ULID, ev string)
	// Enforce cancels the running handlers whose lease would expire within margin, and
	// those that ran longer than jobTimeout (when positive).
	Enforce(margin, jobTimeout time.Duration)
}

// SendFunc sends, in one round trip, the statements queue adds to a batch (the worker's
// sendIndexed: they run with index scans forced).
type SendFunc func(ctx context.Context, queue func(*pgx.Batch)) error

// Config configures an [Extender].
type Config struct {
	// Lease is the lease a run holds: each extension makes it end Lease after it was sent,
	// and the extender ticks every Lease/3. Required (positive).
	Lease time.Duration
	// JobTimeout is how long a handler may run before it is cancelled; zero or negative:
	// no limit.
	JobTimeout time.Duration
	// Logger receives a warning when an extension fails. Required.
	Logger *slog.Logger
	// Send sends the extension's statement. Required.
	Send SendFunc
	// Tracker holds the runs to extend. Required.
	Tracker Tracker
}

// Extender extends the leases of a worker's runs. Build it with [NewExtender]; run it with
// [Extender.Run], or one pass with [Extender.RunOnce].
type Extender struct {
	cfg Config
}

// NewExtender returns an extender configured by cfg.
func NewExtender(cfg Config) *Extender {
	return &Extender{cfg: cfg}
}

// Run extends the leases every Lease/3 and then enforces the leases and JobTimeout, until
// ctx is done.
func (e *Extender) Run(ctx context.Context) {
	every := e.cfg.Lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.RunOnce(ctx)
		e.cfg.Tracker.Enforce(every/2, e.cfg.JobTimeout)
	}
}

// RunOnce sends one extension of the leases the tracker holds, and reports its result to
// the tracker (Extended; RequestStop for the runs asked to stop). The extension takes the
// rows no other transaction holds without waiting for any; then, if some were held, a
// second statement extends those alone and waits for them, within the same budget (half a
// lease), so that one held row delays no other run's extension. When a statement fails
// it logs a warning (unless ctx is done): what the first one extended is reported all the
// same, and a later pass or the self-fencing in Enforce covers the rest.
func (e *Extender) RunOnce(ctx context.Context) {
	p := dbsqlc.ExtendLeasesParams{LeaseUs: delayOf(e.cfg.Lease)}
	e.cfg.Tracker.Leased(&p)
	if len(p.Ids) == 0 {
		return
	}
	sent := time.Now()
	// The statements may take up to half a lease (a loaded server, a pool wait); a later
	// tick or the self-fencing in enforce covers what they could not extend.
	cctx, cancel := context.WithTimeout(ctx, e.cfg.Lease/2)
	defer cancel()
	var rows []*dbsqlc.ExtendLeasesRow
	err := e.cfg.Send(cctx, func(b *pgx.Batch) {
		dbsqlc.QueueExtendLeases(b, p, func(r *dbsqlc.ExtendLeasesRow) { rows = append(rows, r) })
	})
	if err != nil {
		e.warn(ctx, err, len(p.Ids))
		return
	}
	found := make(map[ulid.ULID]bool, len(rows))
	held := dbsqlc.ExtendHeldLeasesParams{LeaseUs: p.LeaseUs}
	for _, r := range rows {
		id := ulid.ULID(r.ID.Bytes)
		found[id] = r.Extended
		if r.StopEvent != "" { // the notification may have been missed
			e.cfg.Tracker.RequestStop(id, r.StopEvent)
		}
	}
	for i, id := range p.Ids { // in the tracker's order: ID order, the lock order
		if extended, ok := found[ulid.ULID(id.Bytes)]; ok && !extended {
			held.Ids, held.Tokens = append(held.Ids, id), append(held.Tokens, p.Tokens[i])
		}
	}
	if len(held.Ids) > 0 {
		kept := map[ulid.ULID]bool{}
		err := e.cfg.Send(cctx, func(b *pgx.Batch) {
			dbsqlc.QueueExtendHeldLeases(b, held, func(r *dbsqlc.ExtendHeldLeasesRow) {
				kept[ulid.ULID(r.ID.Bytes)] = true
			})
		})
		switch {
		case err != nil: // the held ones keep the lease they have
			e.warn(ctx, err, len(held.Ids))
		default:
			for _, id := range held.Ids {
				if kept[id.Bytes] {
					found[id.Bytes] = true
				} else {
					delete(found, id.Bytes) // fenced while it was held (its run ended)
				}
			}
		}
	}
	e.cfg.Tracker.Extended(found, sent)
}

// warn logs a failed extension statement of n runs, unless ctx is done.
func (e *Extender) warn(ctx context.Context, err error, n int) {
	if ctx.Err() == nil {
		e.cfg.Logger.Warn("venturi: lease extension failed", "err", err, "runs", n, "transient", pgerr.IsTransient(err))
	}
}

// delayOf converts a duration into the microseconds the SQL layer takes.
func delayOf(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return d.Microseconds()
}
