package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// CreateBookmarkRequest is the body of POST /bookmarks.
type CreateBookmarkRequest struct {
	URL   string   `json:"url"`
	Title string   `json:"title"`
	Tags  []string `json:"tags"`
}

// Bookmark is a bookmark as the API returns it.
type Bookmark struct {
	ID             string     `json:"id"`
	URL            string     `json:"url"`
	Title          string     `json:"title"`
	Tags           []string   `json:"tags"`
	FetchStatus    string     `json:"fetch_status"`
	FetchError     string     `json:"fetch_error,omitempty"`
	FetchAttempts  int32      `json:"fetch_attempts"`
	PageTitle      string     `json:"page_title,omitempty"`
	ContentSummary string     `json:"content_summary,omitempty"`
	ContentLength  int        `json:"content_length"`
	HTTPStatus     *int32     `json:"http_status,omitempty"`
	ContentType    string     `json:"content_type,omitempty"`
	FinalURL       string     `json:"final_url,omitempty"`
	FetchedAt      *time.Time `json:"fetched_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	FetchJob       *Job       `json:"fetch_job,omitempty"`
}

// MaxCreateWait bounds POST /bookmarks?wait=: a request waits at most this long for its
// fetch, inside the request's time limit (Config.RequestTimeout, 10s by default).
const MaxCreateWait = 8 * time.Second

// answerReserve is the part of a request's time limit that a wait leaves for the answer.
const answerReserve = time.Second

// parseWait reads POST /bookmarks's ?wait=: a Go duration from 0 to MaxCreateWait.
func parseWait(c echo.Context) (time.Duration, error) {
	s := c.QueryParam("wait")
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > MaxCreateWait || len(s) > 32 {
		return 0, &badRequest{msg: "wait must be a duration such as 5s or 500ms, at most " + MaxCreateWait.String(), field: "wait"}
	}
	return d, nil
}

// createBookmark is POST /bookmarks. Once its transaction has committed, the answer is a
// 201 whatever happens next (answerCommitted): a client that saw an error would retry
// and make a second bookmark and fetch.
func (a *API) createBookmark(c echo.Context) error {
	wait, err := parseWait(c)
	if err != nil {
		return err
	}
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		return err
	}
	var req CreateBookmarkRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	var ve ValidationError
	u, msg := checkURL(req.URL)
	if msg != "" {
		ve.add("url", msg)
	}
	title, msg := checkTitle(req.Title)
	if msg != "" {
		ve.add("title", msg)
	}
	tags, msg := checkTags(req.Tags)
	if msg != "" {
		ve.add("tags", msg)
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	idem, err := newIdempotency(c, idemKey, endpointCreateBookmark, CreateBookmarkRequest{URL: u, Title: title, Tags: tags})
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := ulid.Make()
	task := tasks.FetchBookmark{BookmarkID: id.String(), URL: u}
	var (
		job     ulid.ULID
		created *store.Bookmark
	)
	// The bookmark and its fetch commit together: no bookmark without a fetch, no fetch of
	// a bookmark that does not exist. The idempotency key is claimed first, so that a
	// concurrent duplicate waits for this transaction before it writes anything.
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if err := a.claim(ctx, tx, idem, id); err != nil {
			return err
		}
		res, err := a.queue.EnqueueTx(ctx, tx, task, fetchMeta(c, id))
		if err != nil {
			return err
		}
		job = res.ID
		if created, err = a.q.InsertBookmark(ctx, tx, store.InsertBookmarkParams{
			ID: uuidOf(id), Url: u, Title: title, Tags: tags, FetchJobID: uuidOf(res.ID)}); err != nil {
			return err
		}
		return a.enqueueTagRebuild(ctx, tx, tags)
	})
	if errors.Is(err, errKeyClaimed) {
		return a.replay(c, idem)
	}
	if err != nil {
		return err
	}
	if a.cfg.afterCreateCommit != nil {
		a.cfg.afterCreateCommit(ctx)
	}
	atCommit := toBookmark(created)
	atCommit.FetchJob = committedJob(job, task, created.CreatedAt)
	if wait > 0 {
		a.awaitFetch(ctx, job, wait)
		return a.answerCommitted(c, http.StatusCreated, atCommit, a.respondBookmark(c, http.StatusCreated, id))
	}
	return a.answerCommitted(c, http.StatusCreated, atCommit, a.respondCreated(c, created))
}

// respondCreated answers a create without waiting: the bookmark as its transaction wrote
// it (InsertBookmark's RETURNING) and its fetch job as venturi shows it now, one read
// where respondBookmark makes three. The row written is the row respondBookmark would
// read as long as the job has not run: only a run of the bookmark's fetch job writes a
// new bookmark's fetch result (the worker's other updates skip pending bookmarks, and a
// refetch, which merges into the pending job, writes what the row already holds). A job
// that has run (or is gone) takes respondBookmark's path: the bookmark read again after
// the job, so that it is at least as new as the job shown.
func (a *API) respondCreated(c echo.Context, row *store.Bookmark) error {
	j, err := a.queue.Job(c.Request().Context(), ulid.ULID(row.FetchJobID.Bytes))
	if err != nil && !errors.Is(err, venturi.ErrNotFound) {
		return err
	}
	if err != nil || j.RunCount > 0 || (j.State != venturi.StateAvailable && j.State != venturi.StateScheduled) {
		return a.respondBookmark(c, http.StatusCreated, ulid.ULID(row.ID.Bytes))
	}
	b := toBookmark(row)
	b.FetchJob = toJob(j)
	return c.JSON(http.StatusCreated, b)
}

// awaitFetch waits up to wait for a new bookmark's fetch job to end (completed or dead),
// and less when the request's time limit comes first: it leaves answerReserve to answer.
// It holds no database connection while it waits (venturi's Await: one listening
// connection per Queue for all waiters, and a poll a second). It never fails the request:
// the bookmark exists whatever happens here, and is answered as it is when the wait ends.
func (a *API) awaitFetch(ctx context.Context, job ulid.ULID, wait time.Duration) {
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-answerReserve).Before(deadline) {
		deadline = d.Add(-answerReserve)
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if _, err := a.queue.Await(wctx, job); err != nil && wctx.Err() == nil {
		a.log.WarnContext(ctx, "await the fetch of a new bookmark", "job_id", job.String(), "err", err)
	}
}

func (a *API) getBookmark(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return a.respondBookmark(c, http.StatusOK, id)
}

func (a *API) respondBookmark(c echo.Context, status int, id ulid.ULID) error {
	ctx := c.Request().Context()
	row, err := a.q.GetBookmark(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	if !row.FetchJobID.Valid {
		return c.JSON(status, toBookmark(row))
	}
	// The job first, the bookmark again after it: the worker commits a fetch's result and
	// its job's outcome in one transaction, so the row read later is at least as new.
	j, err := a.queue.Job(ctx, ulid.ULID(row.FetchJobID.Bytes))
	if err != nil && !errors.Is(err, venturi.ErrNotFound) { // pruned jobs are simply not shown
		return err
	}
	jobFound := err == nil
	row, err = a.q.GetBookmark(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	b := toBookmark(row)
	if jobFound && row.FetchJobID.Bytes == j.ID {
		b.FetchJob = toJob(j)
	}
	return c.JSON(status, b)
}

func toBookmark(r *store.Bookmark) *Bookmark {
	b := &Bookmark{
		ID: ulid.ULID(r.ID.Bytes).String(), URL: r.Url, Title: r.Title, Tags: r.Tags,
		FetchStatus: r.FetchStatus, FetchError: r.FetchError, FetchAttempts: r.FetchAttempts,
		PageTitle: r.PageTitle, ContentLength: len(r.Content), ContentType: r.ContentType,
		FinalURL: r.FinalUrl, FetchedAt: r.FetchedAt, CreatedAt: r.CreatedAt,
		ContentSummary: summary(r.Content),
	}
	if r.HttpStatus.Valid {
		b.HTTPStatus = &r.HttpStatus.Int32
	}
	if b.Tags == nil {
		b.Tags = []string{}
	}
	return b
}

func summary(s string) string {
	if utf8.RuneCountInString(s) <= summaryRunes {
		return s
	}
	r := []rune(s)[:summaryRunes]
	return string(r) + "…"
}

// BookmarkList is a page of GET /bookmarks.
type BookmarkList struct {
	Items []BookmarkSummary `json:"items"`
	// Next is the cursor of the following page (pass it as ?before=); empty on the last page.
	Next string `json:"next,omitempty"`
}

// BookmarkSummary is a bookmark in a list.
type BookmarkSummary struct {
	ID          string    `json:"id"`
	URL         string    `json:"url"`
	Title       string    `json:"title"`
	Tags        []string  `json:"tags"`
	FetchStatus string    `json:"fetch_status"`
	PageTitle   string    `json:"page_title,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

func (a *API) listBookmarks(c echo.Context) error {
	var ve ValidationError
	limit := 20
	if s := c.QueryParam("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			ve.add("limit", "must be an integer from 1 to 100")
		}
		limit = n
	}
	// One row more than the page: next is set only when another page exists.
	p := store.ListBookmarksParams{MaxRows: int32(limit + 1)}
	if s := c.QueryParam("before"); s != "" {
		id, err := ulid.ParseStrict(s)
		if err != nil {
			ve.add("before", "must be a bookmark ID (the previous page's next)")
		}
		p.Before = uuidOf(id)
	}
	if s := c.QueryParam("tag"); s != "" {
		tags, msg := checkTags([]string{s})
		if msg != "" {
			ve.add("tag", msg)
		} else {
			p.Tag = pgtype.Text{String: tags[0], Valid: true}
		}
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	rows, err := a.q.ListBookmarks(c.Request().Context(), a.pool, p)
	if err != nil {
		return err
	}
	more := len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	out := BookmarkList{Items: make([]BookmarkSummary, 0, len(rows))}
	for _, r := range rows {
		tags := r.Tags
		if tags == nil {
			tags = []string{}
		}
		out.Items = append(out.Items, BookmarkSummary{ID: ulid.ULID(r.ID.Bytes).String(), URL: r.Url, Title: r.Title,
			Tags: tags, FetchStatus: r.FetchStatus, PageTitle: r.PageTitle, CreatedAt: r.CreatedAt})
	}
	if more {
		out.Next = out.Items[len(out.Items)-1].ID
	}
	return c.JSON(http.StatusOK, out)
}

func (a *API) refetchBookmark(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	var res venturi.Result
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		bm, err := a.q.LockBookmark(ctx, tx, uuidOf(id))
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotFound
		}
		if err != nil {
			return err
		}
		// A pending fetch of this bookmark is replaced, so a burst of refetches is one job.
		// It is throttled by RefetchDelay: the burst rides the first refetch's due time.
		task := tasks.FetchBookmark{BookmarkID: id.String(), URL: bm.Url}
		if res, err = a.queue.EnqueueTx(ctx, tx, task, venturi.After(a.cfg.RefetchDelay), fetchMeta(c, id)); err != nil {
			return err
		}
		return a.q.SetFetchPending(ctx, tx, store.SetFetchPendingParams{FetchJobID: uuidOf(res.ID), ID: uuidOf(id)})
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, Enqueued{JobID: res.ID.String(), Action: res.Action.String()})
}

func (a *API) deleteBookmark(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		tags, err := a.q.DeleteBookmark(ctx, tx, uuidOf(id))
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotFound
		}
		if err != nil {
			return err
		}
		return a.enqueueTagRebuild(ctx, tx, tags)
	})
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
