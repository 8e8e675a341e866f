package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// RegisterFetchBookmark registers handleFetchBookmark for tasks.FetchBookmark.
func RegisterFetchBookmark(w *Worker) error {
	return venturi.RegisterFunc(w, handleFetchBookmark)
}

// MaxRetryAfter caps the wait a Retry-After header can impose on a fetch's retry, so that
// a server cannot park a bookmark for days.
const MaxRetryAfter = time.Hour

// FetchAttachment is the evidence each fetch run records in the job's journal.
type FetchAttachment struct {
	URL         string `json:"url"`
	Status      int    `json:"status,omitempty"`
	Bytes       int64  `json:"bytes,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	FinalURL    string `json:"final_url,omitempty"`
	// Reason is the failure's reason code (fetch.Reason*), empty on success.
	Reason string `json:"reason,omitempty"`
	// RetryAfter is the wait a 429 or 503 asked for with Retry-After (before the
	// MaxRetryAfter cap): evidence of what the server said. It sets the retry's delay,
	// except on the last attempt, where the job gives up.
	RetryAfter string `json:"retry_after,omitempty"`
}

// handleFetchBookmark fetches the page and stores its title and text with the bookmark.
// The result and the job's completion commit in one transaction.
//
// Failures come in two classes, because the host's circuit breaker (tasks.FetchBookmark's
// Limits) counts every run that returns an error:
//
//   - A verdict on the page (fetch.Error.Permanent: 404, 410 and other 4xx, not HTML,
//     too large, too many redirects, a refused address, an unknown host name) is final
//     and says nothing against the host: the bookmark is marked failed and the job
//     completes, in one transaction, with the note "fetch failed: <code>". No error is
//     returned, so a site with many dead links does not trip its breaker.
//   - Trouble with the host (timeouts, refused connections, TLS, 5xx, 408, 429, resolver
//     failures) returns an error, which the breaker counts: the job retries with backoff
//     until the bookmark's attempts run out, then dies ("giving up after n attempts"),
//     except that a 429 or 503 with a Retry-After header retries after the wait it asks
//     for (at most MaxRetryAfter).
//
// A failure stores its reason code (fetch.Reason*) in the bookmark's fetch_error and the
// HTTP status in http_status; the journal note says the same ("fetch failed: dns"); the
// underlying error, which can name internal addresses, is logged with the job ID and
// nowhere else.
//
// The fetch of an imported bookmark (ImportID set) is a node of its import's workflow:
// every run that completes outputs a tasks.FetchOutput (fetched, failed with its reason,
// or superseded) for the import's summary. A fetch that gives up ends dead and outputs
// nothing.
func handleFetchBookmark(ctx context.Context, t tasks.FetchBookmark, run *venturi.Run[tasks.FetchCarry], app *App) (venturi.Outcome, error) {
	id, err := parseID(t.BookmarkID)
	if err != nil {
		return venturi.Outcome{}, venturi.Permanentf("bad bookmark id %q: %v", t.BookmarkID, err)
	}
	job := uuidOf(run.ID())
	// output records what the fetch came to, for an import's summary (imported bookmarks
	// only: the others are in no workflow).
	output := func(o tasks.FetchOutput) error {
		if t.ImportID == "" {
			return nil
		}
		return run.SetOutput(o)
	}
	bm, err := app.Store.GetBookmarkForFetch(ctx, app.Pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return venturi.CompletedWith("bookmark deleted; nothing to fetch"), output(tasks.FetchOutput{Status: tasks.FetchStatusSuperseded})
	}
	if err != nil {
		return venturi.Outcome{}, err
	}
	if bm.FetchJobID != job {
		return venturi.CompletedWith("superseded by a newer fetch job"), output(tasks.FetchOutput{Status: tasks.FetchStatusSuperseded})
	}
	att := FetchAttachment{URL: t.URL}
	res, ferr := app.Fetcher.Fetch(ctx, t.URL)
	if ferr != nil {
		var fe *fetch.Error
		if !errors.As(ferr, &fe) {
			fe = &fetch.Error{Reason: fetch.ReasonNetwork, Err: ferr}
		}
		att.Reason, att.Status = fe.Reason, fe.Status
		retryAfter := retryAfterOf(fe)
		if retryAfter > 0 {
			att.RetryAfter = fe.RetryAfter.String()
		}
		_ = run.SetAttachment(att)
		final := fe.Permanent || run.Failures()+1 >= app.MaxFetchAttempts
		// The raw error (resolver and dialled addresses) goes to the log only; the bookmark
		// and the journal get the reason code and the HTTP status.
		app.Log.Warn("fetch failed", "job_id", run.ID().String(), "bookmark_id", t.BookmarkID,
			"reason", fe.Reason, "http_status", fe.Status, "attempt", run.Failures()+1, "final", final, "err", fe.Error())
		status := pgtype.Int4{Int32: int32(fe.Status), Valid: fe.Status != 0}
		record := store.RecordFetchFailureParams{Final: final, FetchError: fe.Reason, HttpStatus: status, ID: id, FetchJobID: job}
		failed := fetchFailed{fe.Summary()}
		if fe.Permanent {
			// A verdict on the page: the job completes (see above), with the failure.
			var out venturi.Outcome
			err := pgx.BeginFunc(ctx, app.Pool, func(tx pgx.Tx) error {
				n, err := app.Store.RecordFetchFailure(ctx, tx, record)
				if err != nil {
					return fmt.Errorf("record failure (%s): %w", fe.Summary(), err)
				}
				result := tasks.FetchOutput{Status: tasks.FetchStatusFailed, Reason: fe.Reason, HTTPStatus: fe.Status}
				if n == 0 { // deleted or refetched meanwhile: the failure is not the bookmark's
					result = tasks.FetchOutput{Status: tasks.FetchStatusSuperseded}
				}
				if err := output(result); err != nil {
					return err
				}
				out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith(failed.Error()))
				return err
			})
			return out, err
		}
		if _, err := app.Store.RecordFetchFailure(ctx, app.Pool, record); err != nil {
			return venturi.Outcome{}, fmt.Errorf("record failure (%s): %w", fe.Summary(), err)
		}
		if final {
			return venturi.Outcome{}, venturi.Permanentf("giving up after %d attempts: %w", run.Failures()+1, failed)
		}
		if retryAfter > 0 {
			return venturi.Outcome{}, venturi.RetryIn(retryAfter, failed)
		}
		return venturi.Outcome{}, failed
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
		result := tasks.FetchOutput{Status: tasks.FetchStatusFetched, HTTPStatus: res.Status, TitleFound: res.Title != ""}
		if n == 0 {
			note = "fetched, but the bookmark was deleted or refetched meanwhile; result dropped"
			result = tasks.FetchOutput{Status: tasks.FetchStatusSuperseded}
		}
		if err := output(result); err != nil {
			return err
		}
		out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith(note))
		return err
	})
	return out, err
}

// fetchFailed is the error a failed fetch returns to venturi, whose message becomes the
// job's journal note: "fetch failed: " and the reason code, with the HTTP status when a
// response arrived ("fetch failed: http_status 503"). It holds no underlying error, so no
// address or resolver detail reaches the journal (or the API that shows it).
type fetchFailed struct{ summary string }

func (f fetchFailed) Error() string { return "fetch failed: " + f.summary }

// retryAfterOf returns the delay before the retry of a failed fetch that a 429 or 503
// asked for with Retry-After, capped at MaxRetryAfter; zero means the usual backoff.
func retryAfterOf(fe *fetch.Error) time.Duration {
	if fe.Permanent || fe.RetryAfter <= 0 ||
		(fe.Status != http.StatusTooManyRequests && fe.Status != http.StatusServiceUnavailable) {
		return 0
	}
	return min(fe.RetryAfter, MaxRetryAfter)
}
