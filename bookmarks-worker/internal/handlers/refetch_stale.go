package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// Refetch configures the daily refetch of stale bookmarks: a durable cron schedule
// (tasks.RefetchStaleSchedule) that enqueues a tasks.RefetchStale. A zero field takes its
// default.
type Refetch struct {
	// Cron is the schedule's expression (default "0 3 * * *": daily at 03:00) and TimeZone
	// the zone it is read in (default UTC).
	Cron     string
	TimeZone string
	// StaleAfter is the age of a fetch that makes a bookmark stale (default 7 days).
	StaleAfter time.Duration
	// Batch is how many bookmarks one batch examines, in ID order (default 500), and
	// MaxBatches the most batches one sweep runs (default 200): a sweep examines at most
	// Batch*MaxBatches bookmarks and enqueues at most as many fetches.
	Batch      int
	MaxBatches int
}

// Refetch defaults.
const (
	DefaultRefetchCron       = "0 3 * * *"
	DefaultRefetchStaleAfter = 7 * 24 * time.Hour
	DefaultRefetchBatch      = 500
	DefaultRefetchMaxBatches = 200
)

func (r Refetch) withDefaults() Refetch {
	if r.Cron == "" {
		r.Cron = DefaultRefetchCron
	}
	if r.TimeZone == "" {
		r.TimeZone = "UTC"
	}
	if r.StaleAfter <= 0 {
		r.StaleAfter = DefaultRefetchStaleAfter
	}
	if r.Batch <= 0 {
		r.Batch = DefaultRefetchBatch
	}
	if r.MaxBatches <= 0 {
		r.MaxBatches = DefaultRefetchMaxBatches
	}
	return r
}

// Schedule is the durable schedule of the daily refetch for these settings. A missed
// sweep (no worker up at its time) runs once when a worker comes back, however many
// days it missed (venturi.MissedOnce).
func (r Refetch) Schedule() venturi.Schedule {
	r = r.withDefaults()
	return venturi.Schedule{
		Name:     tasks.RefetchStaleSchedule,
		Cron:     r.Cron,
		TimeZone: r.TimeZone,
		Task: tasks.RefetchStale{StaleAfterS: int64(r.StaleAfter / time.Second), Batch: r.Batch,
			MaxBatches: r.MaxBatches},
		Missed: venturi.MissedOnce,
	}
}

// RegisterRefetchSchedule registers (or updates) the daily refetch's schedule. Every
// worker calls it at start: an unchanged definition changes nothing, concurrent
// registrations from several replicas are serialized, and changed settings take effect
// from the next fire.
func RegisterRefetchSchedule(ctx context.Context, q *venturi.Queue, r Refetch) error {
	if _, err := q.Schedule(ctx, r.Schedule()); err != nil {
		return fmt.Errorf("register the refetch schedule: %w", err)
	}
	return nil
}

// RegisterRefetchStale registers handleRefetchStale for tasks.RefetchStale.
func RegisterRefetchStale(w *Worker) error {
	return venturi.RegisterFunc(w, handleRefetchStale)
}

// handleRefetchStale runs one sweep: it walks the bookmarks in ID order, a batch at a
// time, and enqueues a FetchBookmark for each stale one (fetched or failed more than
// StaleAfter ago, by the database clock; never one whose fetch is pending), so the
// fetches run under FetchBookmark's flow control and merge with pending ones. It
// checkpoints its position after every batch, so a run cut short continues there, and
// hands over at shutdown. It stops at the end of the table or after MaxBatches batches.
func handleRefetchStale(ctx context.Context, t tasks.RefetchStale, run *venturi.Run[tasks.RefetchStaleCarry], app *App) (venturi.Outcome, error) {
	if err := t.Validate(); err != nil {
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	c := run.CarryMut()
	for c.Batches < t.MaxBatches {
		select {
		case <-run.Shutdown():
			return venturi.PauseInWith(0, fmt.Sprintf("handing over after %d batches", c.Batches)), nil
		default:
		}
		after := pgtype.UUID{Valid: true} // the zero UUID sorts before every ULID
		if c.After != "" {
			id, err := ulid.Parse(c.After)
			if err != nil {
				return venturi.Outcome{}, venturi.Permanentf("corrupt position %q", c.After)
			}
			after = uuidOf(id)
		}
		page, err := app.Store.LinkCheckPage(ctx, app.Pool, store.LinkCheckPageParams{
			After: after, MaxRows: int32(t.Batch), StaleAfterS: t.StaleAfter().Seconds()})
		if err != nil {
			return venturi.Outcome{}, err
		}
		for _, bm := range page {
			if bm.Stale {
				if err := app.refetchStale(ctx, bm.ID, bm.Url); err != nil {
					return venturi.Outcome{}, err
				}
				c.Refetched++
			}
			c.After = ulid.ULID(bm.ID.Bytes).String()
		}
		c.Batches++
		if len(page) < t.Batch {
			return venturi.CompletedWith(fmt.Sprintf("refetched %d stale bookmarks in %d batches", c.Refetched, c.Batches)), nil
		}
		if err := run.Checkpoint(ctx); err != nil {
			return venturi.Outcome{}, err
		}
	}
	app.Log.WarnContext(ctx, "refetch sweep stopped at its batch limit", "batches", c.Batches, "refetched", c.Refetched, "after", c.After)
	return venturi.CompletedWith(fmt.Sprintf("refetched %d stale bookmarks; stopped after %d batches at %s", c.Refetched, c.Batches, c.After)), nil
}
