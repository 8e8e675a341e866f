package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// RegisterImportBookmarks registers handleImportBookmarks for tasks.ImportBookmarks.
func RegisterImportBookmarks(w *Worker) error {
	return venturi.RegisterFunc(w, handleImportBookmarks)
}

// ImportPause is the pause between two pages: zero yields at once, letting other jobs run.
const ImportPause = 0 * time.Second

// handleImportBookmarks imports one page of the import, starting at the carry's
// checkpoint: it creates the page's bookmarks, enqueues their fetches, advances the
// checkpoint and records the outcome in one transaction, then pauses until the next page.
//
// The run that finds no item left completes the job: it marks the import done, asks for
// its tags to be recounted and records the totals, again in one transaction. Completion
// gets a run of its own because venturi stores a carry only when the job goes back to
// pending (a pause or a retry), never when it completes: had the last page completed the
// job, the carry the job keeps, which GET /imports/{id} shows, would be the previous
// page's, with stale counts.
func handleImportBookmarks(ctx context.Context, t tasks.ImportBookmarks, run *venturi.Run[tasks.ImportCarry], app *App) (venturi.Outcome, error) {
	id, err := parseID(t.ImportID)
	if err != nil {
		return venturi.Outcome{}, venturi.Permanentf("bad import id %q: %v", t.ImportID, err)
	}
	imp, err := app.Store.GetImportForRun(ctx, app.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return venturi.CompletedWith("import deleted"), nil
	}
	if err != nil {
		return venturi.Outcome{}, err
	}
	size := t.Size()
	saved := run.Carry()
	var out venturi.Outcome
	err = pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
		c := saved // work on a copy: the carry advances only with the commit
		carry := &c
		rows, err := app.Store.ImportPage(ctx, tx, store.ImportPageParams{
			ImportID: id, FromPosition: int32(carry.Next), MaxRows: int32(size)})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			// Every page is in: the carry is final (the last page's pause stored it).
			if len(imp.Tags) > 0 && carry.Imported > 0 {
				if _, err := app.Queue.EnqueueTx(ctx, tx, tasks.NewRebuildTagIndex(imp.Tags...), venturi.After(time.Second)); err != nil {
					return err
				}
			}
			if err := app.Store.SetImportProgress(ctx, tx, store.SetImportProgressParams{
				Status: "done", Imported: int32(carry.Imported), Skipped: int32(carry.Skipped), ID: id}); err != nil {
				return err
			}
			_ = run.SetAttachment(carry)
			out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith(fmt.Sprintf("imported %d of %d items in %d pages (%d skipped)",
				carry.Imported, imp.Total, carry.Pages, carry.Skipped)))
			return err
		}
		for _, r := range rows {
			carry.Next = int(r.Position) + 1
			if fetch.CheckURL(r.Url) != nil || len(r.Url) > 2048 {
				carry.Skipped++
				continue
			}
			bid := ulid.Make()
			fb := tasks.FetchBookmark{BookmarkID: bid.String(), URL: r.Url, ImportID: t.ImportID}
			res, err := app.Queue.EnqueueTx(ctx, tx, fb)
			if err != nil {
				return fmt.Errorf("enqueue fetch: %w", err)
			}
			if err := app.Store.InsertImportedBookmark(ctx, tx, store.InsertImportedBookmarkParams{
				ID: uuidOf(bid), Url: r.Url, Title: r.Title, Tags: imp.Tags, ImportID: id,
				FetchJobID: uuidOf(res.ID),
			}); err != nil {
				return err
			}
			carry.Imported++
		}
		carry.Pages++
		if err := app.Store.SetImportProgress(ctx, tx, store.SetImportProgressParams{
			Status: "running", Imported: int32(carry.Imported), Skipped: int32(carry.Skipped), ID: id}); err != nil {
			return err
		}
		_ = run.SetAttachment(carry)
		run.SetCarry(c)
		out, err = run.CompleteTx(ctx, tx, venturi.PauseInWith(ImportPause, fmt.Sprintf("page %d: %d/%d items, %d imported, %d skipped",
			carry.Pages, carry.Next, imp.Total, carry.Imported, carry.Skipped)))
		return err
	})
	if err != nil {
		// The transaction rolled back, so the checkpoint must not advance: a retry persists
		// the carry as it is now, and the journal shows that one, not the counts that
		// did not commit.
		run.SetCarry(saved)
		_ = run.SetAttachment(saved)
	}
	return out, err
}
