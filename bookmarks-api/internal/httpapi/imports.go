package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// CreateImportRequest is the body of POST /imports: a browser's bookmarks export as a list.
type CreateImportRequest struct {
	Items []ImportItem `json:"items"`
	// Tags are added to every imported bookmark.
	Tags []string `json:"tags"`
	// PageSize is the number of items imported per step (default 50, at most 1000).
	PageSize int `json:"page_size"`
}

// ImportItem is one exported bookmark. Its URL is validated and normalised as POST
// /bookmarks's is: an import with an invalid item is refused (422, items[i].url). The
// worker still counts as skipped an item its fetcher refuses outright (an IPv4 host in a
// non-canonical form such as 2130706433, which the API does not judge).
type ImportItem struct {
	URL   string `json:"url"`
	Title string `json:"title"`
}

// Import is an import's progress. Status is awaiting_confirmation (a large import, until
// it is confirmed), pending, running, done or cancelled: the import of the items, which
// ends before the fetches of the bookmarks it made. Workflow is the state of the whole
// (the fetches, the tag recount and the summary after the items), and Summary what the
// fetches came to, once it is written.
type Import struct {
	ID         string     `json:"id"`
	Status     string     `json:"status"`
	Total      int32      `json:"total"`
	Imported   int32      `json:"imported"`
	Skipped    int32      `json:"skipped"`
	Tags       []string   `json:"tags"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// Confirmation is set for an import that waits (or waited) for a confirmation.
	Confirmation *Confirmation `json:"confirmation,omitempty"`
	// Job is the import's job: the workflow's import node, which imports the items.
	Job *Job `json:"job,omitempty"`
	// Workflow is the import's workflow; absent for an import made before workflows, and
	// once venturi has pruned the finished workflow (its retention).
	Workflow *ImportWorkflow `json:"workflow,omitempty"`
	// Summary is what the import's fetches came to; absent until the workflow's summary
	// node has written it (and for an import made before workflows).
	Summary *ImportSummary `json:"summary,omitempty"`
}

// ImportWorkflow is the state of an import's workflow (tasks.NewImportWorkflow): the
// import of the items, then one fetch per bookmark made, then the recount of the import's
// tags, then the summary.
type ImportWorkflow struct {
	// ID is the venturi workflow's ID, as Job.ID is the job's.
	ID string `json:"id"`
	// State is open until every node has ended, then succeeded; failed when a node failed
	// (a fetch that gave up on its host), cancelled when one was cancelled (the import,
	// DELETE /imports/{id}). The fetches, the recount and the summary run whatever the
	// import's end.
	State      string     `json:"state"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// ImportSummary is what an import's fetches came to, written by the workflow's summary
// node: fetched + failed + gave_up + superseded = fetches.
type ImportSummary struct {
	// Fetches is how many fetches the import made: one per bookmark it created.
	Fetches int32 `json:"fetches"`
	// Fetched counts the pages fetched and stored; TitlesFound those of them with a title.
	Fetched     int32 `json:"fetched"`
	TitlesFound int32 `json:"titles_found"`
	// Failed counts verdicts on the page (404, not HTML, a refused address...), and
	// Failures counts them by reason code (the fetch_error codes of GET /bookmarks/{id}).
	Failed   int32            `json:"failed"`
	Failures map[string]int32 `json:"failures"`
	// GaveUp counts fetches that ended without a result: the host kept failing until
	// their attempts ran out.
	GaveUp int32 `json:"gave_up"`
	// Superseded counts fetches a refetch or a delete of the bookmark took over.
	Superseded int32 `json:"superseded"`
	// TagIndex is "rebuilt", or "failed" when the recount of the import's tags did not
	// complete.
	TagIndex     string    `json:"tag_index"`
	SummarizedAt time.Time `json:"summarized_at"`
}

// maxItemErrors bounds the per-item messages of a refused import: past it, the field
// items says how many items are invalid in all.
const maxItemErrors = 100

// createImport is POST /imports. Every item's URL is checked and normalised as POST
// /bookmarks's is (checkURL); an import with an invalid item is refused whole, with a
// message per item (items[i].url). Once its transaction has committed the answer is a 202
// whatever happens next, as for createBookmark.
func (a *API) createImport(c echo.Context) error {
	idemKey, err := idempotencyKeyOf(c)
	if err != nil {
		return err
	}
	var req CreateImportRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	var ve ValidationError
	if len(req.Items) == 0 {
		ve.add("items", "must list at least one bookmark")
	} else if len(req.Items) > MaxImportItems {
		ve.add("items", "at most "+strconv.Itoa(MaxImportItems)+" bookmarks per import")
	}
	tags, msg := checkTags(req.Tags)
	if msg != "" {
		ve.add("tags", msg)
	}
	if req.PageSize < 0 || req.PageSize > 1000 {
		ve.add("page_size", "must be from 1 to 1000 (0 for the default)")
	}
	items := make([]ImportItem, len(req.Items))
	urls := make([]string, len(req.Items))
	titles := make([]string, len(req.Items))
	invalid := 0
	for i, it := range req.Items {
		u, umsg := checkURL(it.URL)
		t, tmsg := checkTitle(it.Title)
		if umsg != "" || tmsg != "" {
			if invalid++; invalid <= maxItemErrors {
				if umsg != "" {
					ve.add("items["+strconv.Itoa(i)+"].url", umsg)
				}
				if tmsg != "" {
					ve.add("items["+strconv.Itoa(i)+"].title", tmsg)
				}
			}
		}
		items[i], urls[i], titles[i] = ImportItem{URL: u, Title: t}, u, t
	}
	if invalid > maxItemErrors {
		ve.add("items", strconv.Itoa(invalid)+" items are invalid; the first "+strconv.Itoa(maxItemErrors)+" are named")
	}
	if err := ve.orNil(); err != nil {
		return err
	}
	idem, err := newIdempotency(c, idemKey, endpointCreateImport, CreateImportRequest{Items: items, Tags: tags, PageSize: req.PageSize})
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := ulid.Make()
	task := tasks.ImportBookmarks{ImportID: id.String(), PageSize: req.PageSize}
	confirm := a.cfg.ImportConfirmAbove != NoImportConfirmation && len(urls) > a.cfg.ImportConfirmAbove
	status, link := "pending", ""
	if confirm {
		status = "awaiting_confirmation"
	}
	var (
		created *store.BookmarkImport
		job     ulid.ULID
		expires time.Time
	)
	// The import, its items, its workflow and (for a large import) its confirmation commit
	// together: the worker never sees an import without the confirmation it must wait for.
	// pgx.BeginFunc's transaction is READ COMMITTED (the server's default), as
	// EnqueueWorkflowTx requires.
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		if err := a.claim(ctx, tx, idem, id); err != nil {
			return err
		}
		res, err := a.queue.EnqueueWorkflowTx(ctx, tx, tasks.NewImportWorkflow(task, tags))
		if err != nil {
			return err
		}
		if res.Action != venturi.ActionInserted { // the key is the import's new ID: never kept
			return fmt.Errorf("enqueue the workflow of import %s: %v", id, res.Action)
		}
		job = res.Jobs[tasks.ImportNodeImport]
		if created, err = a.q.InsertImport(ctx, tx, store.InsertImportParams{ID: uuidOf(id), JobID: uuidOf(job),
			WorkflowID: uuidOf(res.ID), Status: status, Tags: tags, Total: int32(len(urls))}); err != nil {
			return err
		}
		if _, err = a.q.InsertImportItems(ctx, tx, store.InsertImportItemsParams{ImportID: uuidOf(id), Urls: urls, Titles: titles}); err != nil {
			return err
		}
		if !confirm {
			return nil
		}
		token, digest := newConfirmToken()
		if expires, err = a.q.InsertImportConfirmation(ctx, tx, store.InsertImportConfirmationParams{ImportID: uuidOf(id),
			TokenHash: digest[:], TimeoutUs: a.cfg.ImportConfirmTimeout.Microseconds()}); err != nil {
			return err
		}
		link = a.confirmLink(id, token)
		return nil
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
	atCommit := toImport(created)
	atCommit.Job = committedJob(job, task, created.CreatedAt)
	atCommit.Workflow = &ImportWorkflow{ID: ulid.ULID(created.WorkflowID.Bytes).String(), State: string(venturi.WorkflowOpen)}
	if confirm {
		atCommit.Confirmation = &Confirmation{ExpiresAt: expires, URL: link}
	}
	out, err := a.loadImport(ctx, id)
	if err != nil {
		return a.answerCommitted(c, http.StatusAccepted, atCommit, err)
	}
	if out.Confirmation != nil {
		out.Confirmation.URL = link // shown once: only its digest is stored
	}
	return c.JSON(http.StatusAccepted, out)
}

// toImport is an import's row as the API shows it, without its confirmation and job.
func toImport(r *store.BookmarkImport) *Import {
	out := &Import{ID: ulid.ULID(r.ID.Bytes).String(), Status: r.Status, Total: r.Total, Imported: r.Imported, Skipped: r.Skipped,
		Tags: r.Tags, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt}
	if out.Tags == nil {
		out.Tags = []string{}
	}
	return out
}

func (a *API) getImport(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return a.respondImport(c, http.StatusOK, id)
}

func (a *API) respondImport(c echo.Context, status int, id ulid.ULID) error {
	out, err := a.loadImport(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(status, out)
}

// loadImport reads an import, its confirmation, its job, its workflow and its summary. The
// job and the workflow are read first and the import's rows after them: the worker commits
// an import's progress and its job's outcome in one transaction, and the summary with the
// summary node's completion, so rows read later are at least as new as the job and the
// workflow (a completed job never shows beside an import still "running", nor a succeeded
// workflow without its summary).
func (a *API) loadImport(ctx context.Context, id ulid.ULID) (*Import, error) {
	r, err := a.q.GetImport(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	j, jobErr := a.queue.Job(ctx, ulid.ULID(r.JobID.Bytes))
	if jobErr != nil && !errors.Is(jobErr, venturi.ErrNotFound) {
		return nil, jobErr
	}
	var wf *venturi.WorkflowInfo
	if r.WorkflowID.Valid {
		if wf, err = a.queue.Workflow(ctx, ulid.ULID(r.WorkflowID.Bytes)); errors.Is(err, venturi.ErrWorkflowNotFound) {
			wf = nil // pruned once finished (venturi's retention); the summary stays
		} else if err != nil {
			return nil, err
		}
	}
	r, err = a.q.GetImport(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	out := toImport(r)
	conf, err := a.q.GetImportConfirmation(ctx, a.pool, uuidOf(id))
	switch {
	case err == nil:
		out.Confirmation = toConfirmation(conf)
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	if jobErr == nil {
		out.Job = toJob(j)
		// The job is the truth while it exists: a cancel whose status update did not
		// happen (the API stopped between the two) still shows.
		if j.State == venturi.StateCancelled && out.Status != "done" {
			out.Status = "cancelled"
		}
	}
	if wf != nil {
		out.Workflow = &ImportWorkflow{ID: wf.ID.String(), State: string(wf.State), FinishedAt: wf.FinishedAt}
	}
	sum, err := a.q.GetImportSummary(ctx, a.pool, uuidOf(id))
	switch {
	case err == nil:
		out.Summary = toImportSummary(sum)
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, err
	}
	return out, nil
}

// toImportSummary is an import's summary row as the API shows it. Its failures are the
// worker's reason codes; a row that does not decode shows none rather than failing the
// request.
func toImportSummary(r *store.BookmarkImportSummary) *ImportSummary {
	out := &ImportSummary{Fetches: r.Fetches, Fetched: r.Fetched, TitlesFound: r.TitlesFound, Failed: r.Failed,
		Failures: map[string]int32{}, GaveUp: r.GaveUp, Superseded: r.Superseded, TagIndex: r.TagIndex, SummarizedAt: r.SummarizedAt}
	var failures map[string]int32
	if json.Unmarshal(r.Failures, &failures) == nil && failures != nil {
		out.Failures = failures
	}
	return out
}

// cancelImport is DELETE /imports/{id}: it cancels the import's job (venturi's Cancel). A
// pending or waiting import ends at once (200); a page in progress is asked to stop (202):
// it commits, and the import stops there, its checkpoint in the job's journal. Cancelling
// again is harmless (200, or 202 while the page still runs). 409 when the import has
// already completed (or failed); 404 for an unknown import. The import's record and the
// bookmarks it created stay (their fetches too): the import stops, it is not undone.
func (a *API) cancelImport(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	r, err := a.q.GetImport(ctx, a.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	reason := "cancelled by request"
	if k, ok := keyID(c); ok {
		reason = "cancelled with API key " + k.String()
	}
	res, err := a.queue.Cancel(ctx, ulid.ULID(r.JobID.Bytes), reason)
	if errors.Is(err, venturi.ErrJobFinished) || errors.Is(err, venturi.ErrNotFound) {
		return errImportEnded
	}
	if err != nil {
		return err
	}
	// The job is cancelled or will be, unless a completing run wins: the status update
	// leaves a done import done, and the worker's last run makes it done over this.
	if err := a.q.SetImportCancelled(ctx, a.pool, uuidOf(id)); err != nil {
		return err
	}
	out, err := a.loadImport(ctx, id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res == venturi.CancelRequested || out.Job != nil && out.Job.State == string(venturi.StateRunning) {
		status = http.StatusAccepted
	}
	return c.JSON(status, out)
}
