package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// LinkCheck configures the link checker (tasks.LinkChecker). A zero field takes its
// default.
type LinkCheck struct {
	// PageSize is how many bookmarks one step checks (default 100).
	PageSize int
	// Interval is the pause between two steps (default 5s): at 100 bookmarks per 5 s, the
	// checker walks 72,000 bookmarks an hour.
	Interval time.Duration
	// StaleAfter is the age of a fetch after which the checker refetches the page
	// (default 7 days).
	StaleAfter time.Duration
}

func (l LinkCheck) withDefaults() LinkCheck {
	if l.PageSize <= 0 {
		l.PageSize = 100
	}
	if l.Interval <= 0 {
		l.Interval = 5 * time.Second
	}
	if l.StaleAfter <= 0 {
		l.StaleAfter = 7 * 24 * time.Hour
	}
	return l
}

// RegisterLinkChecker registers handleLinkChecker for tasks.LinkChecker, a singleton
// service: the worker ensures its one job when it starts.
func RegisterLinkChecker(w *Worker) error {
	return venturi.RegisterFunc(w, handleLinkChecker)
}

// handleLinkChecker walks every bookmark page by page, forever: each step reads the next
// page after the carry's position, enqueues a refetch of every stale bookmark (the fetches
// run under FetchBookmark's flow control), moves the position and checkpoints it. At the
// end of the table it starts the next pass. On shutdown it pauses with its position, so
// another worker takes over at once.
func handleLinkChecker(ctx context.Context, _ tasks.LinkChecker, run *venturi.Run[tasks.LinkCheckerCarry], app *App) (venturi.Outcome, error) {
	cfg := app.LinkCheck.withDefaults()
	c := run.CarryMut()
	for {
		select {
		case <-run.Shutdown():
			return venturi.PauseInWith(0, fmt.Sprintf("handing over in pass %d after %q", c.Pass+1, c.After)), nil
		default:
		}
		if err := app.checkLinkPage(ctx, c, cfg); err != nil {
			return venturi.Outcome{}, err // restarted after tasks.LinkCheckerRestartDelay
		}
		if err := run.Checkpoint(ctx); err != nil {
			return venturi.Outcome{}, err
		}
		timer := time.NewTimer(cfg.Interval)
		select {
		case <-run.Shutdown():
			timer.Stop()
			return venturi.PauseInWith(0, fmt.Sprintf("handing over in pass %d after %q", c.Pass+1, c.After)), nil
		case <-ctx.Done():
			timer.Stop()
			return venturi.Outcome{}, ctx.Err()
		case <-timer.C:
		}
	}
}

// checkLinkPage checks one page after c.After and advances c.
func (app *App) checkLinkPage(ctx context.Context, c *tasks.LinkCheckerCarry, cfg LinkCheck) error {
	after := pgtype.UUID{Valid: true} // the zero UUID sorts before every ULID
	if c.After != "" {
		id, err := ulid.Parse(c.After)
		if err != nil {
			c.After = "" // a corrupt position: start the pass again
			return nil
		}
		after = uuidOf(id)
	}
	page, err := app.Store.LinkCheckPage(ctx, app.Pool, store.LinkCheckPageParams{
		After: after, MaxRows: int32(cfg.PageSize), StaleAfterS: cfg.StaleAfter.Seconds()})
	if err != nil {
		return err
	}
	for _, bm := range page {
		if bm.Stale {
			if err := app.refetchStale(ctx, bm.ID, bm.Url); err != nil {
				return err
			}
			c.Refetched++
		}
		c.Checked++
		c.After = ulid.ULID(bm.ID.Bytes).String()
	}
	if len(page) < cfg.PageSize {
		c.Pass++
		app.Log.InfoContext(ctx, "link checker finished a pass", "pass", c.Pass, "checked", c.Checked, "refetched", c.Refetched)
		c.After = ""
	}
	return nil
}

// refetchStale enqueues a fetch of a stale bookmark and points the bookmark at it, in one
// transaction, as the API's refetch does.
func (app *App) refetchStale(ctx context.Context, id pgtype.UUID, url string) error {
	return pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
		res, err := app.Queue.EnqueueTx(ctx, tx, tasks.FetchBookmark{BookmarkID: ulid.ULID(id.Bytes).String(), URL: url})
		if err != nil {
			return err
		}
		_, err = app.Store.MarkRefetchPending(ctx, tx, store.MarkRefetchPendingParams{FetchJobID: uuidOf(res.ID), ID: id})
		return err
	})
}
