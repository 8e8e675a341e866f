package handlers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// RegisterFetchImportedBookmarks registers handleFetchImportedBookmarks for
// tasks.FetchImportedBookmarks.
func RegisterFetchImportedBookmarks(w *Worker) error {
	return venturi.RegisterFunc(w, handleFetchImportedBookmarks)
}

// handleFetchImportedBookmarks is the fetch node of an import's workflow
// (tasks.NewImportWorkflow). It runs once the import node ended, however it ended (done,
// cancelled, dead), so the bookmarks an import made are fetched even when it stopped
// early. It spawns one tasks.FetchBookmark node per bookmark of the import that has no
// fetch job yet, named after the bookmark ("fetch/<bookmark id>"), points each bookmark at
// its fetch's job, and completes, all in one transaction: venturi writes spawned nodes
// with the completion that spawned them (Run.Spawn with CompleteTx), so either every
// bookmark has its fetch or none has and the run is retried. What needs this node (the
// reindex and the summary) waits for every fetch it spawned.
//
// A bookmark that a refetch reached first (it has a fetch job already) is left to that
// fetch. An import has at most MaxImportItems (5,000) items, under the
// venturi.MaxWorkflowNodes one run may spawn.
func handleFetchImportedBookmarks(ctx context.Context, t tasks.FetchImportedBookmarks, run *venturi.Run[struct{}], app *App) (venturi.Outcome, error) {
	id, err := parseID(t.ImportID)
	if err != nil {
		return venturi.Outcome{}, venturi.Permanentf("bad import id %q: %v", t.ImportID, err)
	}
	rows, err := app.Store.ImportedBookmarksToFetch(ctx, app.Pool, store.ImportedBookmarksToFetchParams{
		ImportID: id, MaxRows: venturi.MaxWorkflowNodes})
	if err != nil {
		return venturi.Outcome{}, err
	}
	var params store.SetImportedFetchJobsParams
	if len(rows) > 0 {
		fetches := venturi.NewWorkflow("")
		for _, r := range rows {
			bid := ulid.ULID(r.ID.Bytes).String()
			fetches.Add(bid, tasks.FetchBookmark{BookmarkID: bid, URL: r.Url, ImportID: t.ImportID})
		}
		jobs, err := run.Spawn(ctx, fetches)
		switch {
		case errors.Is(err, venturi.ErrNotInWorkflow) || errors.Is(err, venturi.ErrWorkflowInvalid):
			return venturi.Outcome{}, venturi.Permanent(err) // enqueued outside an import's workflow
		case err != nil:
			return venturi.Outcome{}, err
		}
		for name, job := range jobs { // named <this node>/<bookmark id>
			bid, err := ulid.ParseStrict(name[strings.LastIndexByte(name, '/')+1:])
			if err != nil {
				return venturi.Outcome{}, fmt.Errorf("spawned node %q: %w", name, err)
			}
			params.Ids = append(params.Ids, uuidOf(bid))
			params.JobIds = append(params.JobIds, uuidOf(job))
		}
	}
	if err := run.SetOutput(tasks.ImportFetchesOutput{Fetches: len(rows)}); err != nil {
		return venturi.Outcome{}, err
	}
	var out venturi.Outcome
	err = pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
		note := "no bookmark to fetch"
		if len(rows) > 0 {
			n, err := app.Store.SetImportedFetchJobs(ctx, tx, params)
			if err != nil {
				return err
			}
			note = fmt.Sprintf("spawned %d fetches", len(rows))
			if left := int64(len(rows)) - n; left > 0 { // their fetches complete as superseded
				note += fmt.Sprintf(" (%d bookmarks refetched meanwhile)", left)
			}
		}
		var err error
		out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith(note))
		return err
	})
	return out, err
}
