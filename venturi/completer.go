package venturi

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi/internal/completer"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
)

// newTracker returns the run tracker of a worker configured by cfg (internal/jobrun),
// cancelling runs with the worker's causes.
func newTracker(cfg Config, log *slog.Logger) *jobrun.Tracker {
	return jobrun.NewTracker(jobrun.TrackerConfig{
		Lease: cfg.Lease, Grace: cfg.ShutdownGrace, Logger: log,
		LeaseLost: ErrLeaseLost, Stopped: errStopped, TimedOut: errJobTimeout,
	})
}

// newWriter returns the writer of run ends on db (the worker's control pool, or for Drain
// the application's): plain ends in one pipeline after SetLocalFinish, the others in an inHotTx
// transaction bounded by the lease.
func newWriter(cfg Config, channel string, db *pgxpool.Pool, q *dbsqlc.Queries, log *slog.Logger) completer.Writer {
	return completer.Writer{
		Worker: cfg.ID, Keep: cfg.keep(), Queries: q, Channel: channel, Logger: log,
		Send: func(ctx context.Context, channel string, queue func(*pgx.Batch)) error {
			b := &pgx.Batch{}
			dbsqlc.QueueSetLocalFinish(b, channel)
			queue(b)
			return db.SendBatch(ctx, b).Close()
		},
		InTx: func(ctx context.Context, fn func(pgx.Tx) error) error {
			return inHotTx(ctx, db, idleTxBound(cfg.Lease), fn)
		},
	}
}

// newCompleter returns the worker's run completer (internal/completer): it writes on db,
// settles runs with tracker, calls again when a result made a job pending again, and
// publishes each settled end to hub.
func newCompleter(cfg Config, db *pgxpool.Pool, q *dbsqlc.Queries, tracker *jobrun.Tracker, again func(), channel string, hub *eventHub, log *slog.Logger) *completer.Completer {
	return completer.New(completer.Config{
		Writer: newWriter(cfg, channel, db, q, log), DB: db, Tracker: tracker, Again: again,
		Publish: endPublisher(hub, cfg.ID), CleanNote: cleanNote, Logger: log,
		Buffer: 4 * cfg.totalConcurrency(),
	})
}

// endPublisher returns the completer's Publish for hub: a written end is published as
// its run's end event, a discarded one as lease_lost (the job was rescued meanwhile), and
// a dropped one only releases the started events hub holds for it.
func endPublisher(hub *eventHub, worker string) func(*jobrun.End, completer.Fate) {
	return func(r *jobrun.End, fate completer.Fate) {
		switch {
		case fate == completer.Dropped:
			hub.publishEnd(r.Job.ID, nil)
		case !hub.tracksEnds():
		case fate == completer.Discarded:
			lost := *r
			lost.Entry.Event, lost.State = string(EventLeaseLost), dbsqlc.VenturiJobStateRunning
			ev := endEvent(&lost, worker)
			hub.publishEnd(r.Job.ID, &ev)
		default:
			ev := endEvent(r, worker)
			hub.publishEnd(r.Job.ID, &ev)
		}
	}
}

// keep is how long the jobs the worker's runs end stay in the history of finished jobs.
func (c Config) keep() completer.Retention {
	return completer.Retention{Completed: c.RetainCompleted, Dead: c.RetainDead}
}
