package handlers

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// FetchBookmark runs tasks.FetchBookmark.
type FetchBookmark tasks.FetchBookmark

// Kind implements venturi.Task.
func (t FetchBookmark) Kind() string { return tasks.FetchBookmark(t).Kind() }

// RegisterFetchBookmark registers FetchBookmark.
func RegisterFetchBookmark(w *Worker) error { return venturi.RegisterSafely[FetchBookmark](w) }

// FetchAttachment is the evidence each fetch run records in the job's journal.
type FetchAttachment struct {
	URL         string `json:"url"`
	Status      int    `json:"status,omitempty"`
	Bytes       int64  `json:"bytes,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	FinalURL    string `json:"final_url,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// Handle fetches the page and stores its title and text with the bookmark. The result and
// the job's completion commit in one transaction. A refused address, 410 Gone and other
// permanent failures kill the job and mark the bookmark failed; 5xx, 429 and timeouts
// retry with backoff until the bookmark's attempts run out.
func (t FetchBookmark) Handle(ctx context.Context, run *venturi.Run[tasks.FetchCarry], app *App) (venturi.Outcome, error) {
	id, err := parseID(t.BookmarkID)
	if err != nil {
		return venturi.Outcome{}, venturi.Permanentf("bad bookmark id %q: %v", t.BookmarkID, err)
	}
	job := uuidOf(run.ID())
	bm, err := app.Store.GetBookmarkForFetch(ctx, app.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return venturi.CompletedWith("bookmark deleted; nothing to fetch"), nil
	}
	if err != nil {
		return venturi.Outcome{}, err
	}
	if bm.FetchJobID != job {
		return venturi.CompletedWith("superseded by a newer fetch job"), nil
	}
	att := FetchAttachment{URL: t.URL}
	res, ferr := app.Fetcher.Fetch(ctx, t.URL)
	if ferr != nil {
		var fe *fetch.Error
		if !errors.As(ferr, &fe) {
			fe = &fetch.Error{Reason: fetch.ReasonNetwork, Err: ferr}
		}
		att.Reason, att.Status = fe.Reason, fe.Status
		_ = run.SetAttachment(att)
		final := fe.Permanent || run.Failures()+1 >= app.MaxFetchAttempts
		status := pgtype.Int4{Int32: int32(fe.Status), Valid: fe.Status != 0}
		if _, err := app.Store.RecordFetchFailure(ctx, app.Pool, store.RecordFetchFailureParams{
			Final: final, FetchError: fe.Error(), HttpStatus: status, ID: id, FetchJobID: job,
		}); err != nil {
			return venturi.Outcome{}, fmt.Errorf("record failure %v: %w", fe, err)
		}
		if final {
			if !fe.Permanent {
				return venturi.Outcome{}, venturi.Permanentf("giving up after %d attempts: %w", run.Failures()+1, fe)
			}
			return venturi.Outcome{}, venturi.Permanent(fe)
		}
		return venturi.Outcome{}, fe
	}
	att.Status, att.Bytes, att.ContentType, att.FinalURL = res.Status, res.Bytes, res.ContentType, res.FinalURL
	_ = run.SetAttachment(att)

	var out venturi.Outcome
	err = pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
		n, err := app.Store.StoreFetchResult(ctx, tx, store.StoreFetchResultParams{
			PageTitle: res.Title, Content: res.Text,
			HttpStatus:  pgtype.Int4{Int32: int32(res.Status), Valid: true},
			ContentType: res.ContentType, FinalUrl: res.FinalURL,
			ContentBytes: pgtype.Int8{Int64: res.Bytes, Valid: true},
			ID:           id, FetchJobID: job,
		})
		if err != nil {
			return err
		}
		note := fmt.Sprintf("fetched %d, %d bytes of %s", res.Status, res.Bytes, res.ContentType)
		if n == 0 {
			note = "fetched, but the bookmark was deleted or refetched meanwhile; result dropped"
		}
		out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith(note))
		return err
	})
	return out, err
}
