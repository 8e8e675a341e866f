package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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
// checkpoint: it creates the page's bookmarks, advances the checkpoint and records the
// outcome in one transaction, then pauses until the next page.
//
// An import made as a workflow (its row names one: every import the API makes since
// schema version 7) is the workflow's import node: its bookmarks are created without a
// fetch, and the workflow's next nodes fetch them, recount the tags and summarize, once
// the import has ended however it ended (tasks.NewImportWorkflow). An import made before
// that is a job of its own, and does it all itself, as it did: each page enqueues its
// bookmarks' fetches in its transaction, and the last run asks for the tags' recount.
//
// The run that finds no item left completes the job: it marks the import done, records
// the totals and outputs the final checkpoint (the import node's output), again in one
// transaction. Completion gets a run of its own because venturi stores a carry only when
// the job goes back to pending (a pause or a retry), never when it completes: had the
// last page completed the job, the carry the job keeps, which GET /imports/{id} shows,
// would be the previous page's, with stale counts.
//
// Stopping: a run that starts after its Run.Shutdown closed (the import was cancelled,
// DELETE /imports/{id}, or the worker is shutting down) imports nothing and pauses with its
// checkpoint: a cancel makes that the job's end, with the checkpoint as the journal
// entry's attachment; a shutdown resumes on the next worker. A cancel that arrives during
// a page lets the page commit, and ends the job there (venturi turns the page's pause
// into the cancel). Either way the import stops at the next page boundary.
//
// Confirmation: an import the API marked for confirmation first waits for the signal
// tasks.SignalConfirmImport (see waitForConfirmation).
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
	saved := run.Carry()
	if run.ShuttingDown() {
		_ = run.SetAttachment(saved)
		return venturi.PauseInWith(0, fmt.Sprintf("stopped before page %d: %d/%d items, %d imported, %d skipped",
			saved.Pages+1, saved.Next, imp.Total, saved.Imported, saved.Skipped)), nil
	}
	var confirmation *tasks.ImportConfirmation
	if imp.ConfirmRequired && !saved.Confirmed {
		var out venturi.Outcome
		var ended bool
		confirmation, out, ended, err = waitForConfirmation(ctx, run, app, imp)
		if err != nil {
			return venturi.Outcome{}, err
		}
		if ended {
			return out, nil
		}
		// From here on the confirmation is in the carry, whatever this run's outcome: the
		// signal is consumed with this run, and a retry must not wait for it again.
		saved.Confirmed = true
		run.SetCarry(saved)
	}
	size := t.Size()
	inWorkflow := imp.WorkflowID.Valid
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
			// Every page is in: the carry is final (the last page's pause stored it). An
			// import's workflow recounts the tags in its reindex node.
			if !inWorkflow && len(imp.Tags) > 0 && carry.Imported > 0 {
				if _, err := app.Queue.EnqueueTx(ctx, tx, tasks.NewRebuildTagIndex(imp.Tags...), venturi.After(time.Second)); err != nil {
					return err
				}
			}
			if err := app.Store.SetImportProgress(ctx, tx, store.SetImportProgressParams{
				Status: "done", Imported: int32(carry.Imported), Skipped: int32(carry.Skipped), ID: id}); err != nil {
				return err
			}
			_ = run.SetAttachment(carry)
			if err := run.SetOutput(carry); err != nil {
				return err
			}
			out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith(fmt.Sprintf("imported %d of %d items in %d pages (%d skipped)",
				carry.Imported, imp.Total, carry.Pages, carry.Skipped)))
			return err
		}
		if imp.ConfirmRequired && carry.Pages == 0 { // the first page after the confirmation
			if err := app.Store.SetImportConfirmed(ctx, tx, id); err != nil {
				return err
			}
		}
		for _, r := range rows {
			carry.Next = int(r.Position) + 1
			if fetch.CheckURL(r.Url) != nil || len(r.Url) > 2048 {
				carry.Skipped++
				continue
			}
			bid := ulid.Make()
			var fetchJob pgtype.UUID // none: the workflow's fetch node makes it
			if !inWorkflow {
				fb := tasks.FetchBookmark{BookmarkID: bid.String(), URL: r.Url, ImportID: t.ImportID}
				res, err := app.Queue.EnqueueTx(ctx, tx, fb)
				if err != nil {
					return fmt.Errorf("enqueue fetch: %w", err)
				}
				fetchJob = uuidOf(res.ID)
			}
			if err := app.Store.InsertImportedBookmark(ctx, tx, store.InsertImportedBookmarkParams{
				ID: uuidOf(bid), Url: r.Url, Title: r.Title, Tags: imp.Tags, ImportID: id,
				FetchJobID: fetchJob,
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
		note := fmt.Sprintf("page %d: %d/%d items, %d imported, %d skipped", carry.Pages, carry.Next, imp.Total, carry.Imported, carry.Skipped)
		if confirmation != nil {
			note = confirmedBy(*confirmation) + "; " + note
		}
		out, err = run.CompleteTx(ctx, tx, venturi.PauseInWith(ImportPause, note))
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

// waitForConfirmation is the part of an import's run that needs a confirmation it has not
// read yet. The first run waits for tasks.SignalConfirmImport until the confirmation's
// expiry (computed by the database, which set it when the API created the import): the
// outcome WaitForSignal, state waiting. The run after the wait reads the signal: if one
// arrived, it returns the confirmation and the run imports its first page; if none did
// (the wait timed out), the import ends cancelled, with its status, in one transaction.
// A signal sent before the wait began counts: venturi keeps it, and the wait ends at once.
// ended reports that the run ends with out (a wait, or the cancel); otherwise the
// confirmation is returned.
func waitForConfirmation(ctx context.Context, run *venturi.Run[tasks.ImportCarry], app *App, imp *store.GetImportForRunRow) (
	confirmation *tasks.ImportConfirmation, out venturi.Outcome, ended bool, err error) {
	if _, waited := run.Waited(); !waited {
		_ = run.SetAttachment(map[string]any{"awaiting": tasks.SignalConfirmImport, "items": imp.Total})
		return nil, venturi.WaitForSignal(max(time.Duration(imp.ConfirmLeftUs)*time.Microsecond, 0), tasks.SignalConfirmImport), true, nil
	}
	sigs, err := run.Signals(ctx, tasks.SignalConfirmImport)
	if err != nil {
		return nil, out, false, err
	}
	if len(sigs) > 0 {
		c, err := venturi.DecodeSignal[tasks.ImportConfirmation](sigs[0])
		if err != nil { // a confirmation all the same
			c = tasks.ImportConfirmation{Via: "unknown"}
		}
		return &c, out, false, nil
	}
	timeout := (time.Duration(imp.ConfirmTimeoutUs) * time.Microsecond).Round(time.Second)
	err = pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
		if err := app.Store.SetImportCancelled(ctx, tx, imp.ID); err != nil {
			return err
		}
		var err error
		out, err = run.CompleteTx(ctx, tx, venturi.Cancelled(fmt.Sprintf("not confirmed within %v", timeout)))
		return err
	})
	return nil, out, err == nil, err
}

// confirmedBy describes a confirmation for the journal: the key's ID is not secret.
func confirmedBy(c tasks.ImportConfirmation) string {
	switch {
	case c.Via == "api_key" && c.KeyID != "":
		return "confirmed with API key " + c.KeyID
	case c.Via == "link":
		return "confirmed with the confirmation link"
	}
	return "confirmed"
}
