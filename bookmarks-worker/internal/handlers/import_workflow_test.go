package handlers

// Imports as workflows (tasks.NewImportWorkflow): the import node, the fetch node and the
// fetches it spawns, the reindex node, the summary node. On a real worker and PostgreSQL,
// with the fake fetcher.

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// newImportWorkflow stores an import of urls and enqueues its workflow in one transaction,
// as the API does.
func (b *testBundle) newImportWorkflow(t *testing.T, pageSize int, tags []string, urls ...string) (tasks.ImportBookmarks, venturi.WorkflowResult) {
	t.Helper()
	ctx := context.Background()
	task := tasks.ImportBookmarks{ImportID: ulid.Make().String(), PageSize: pageSize}
	imp, err := parseID(task.ImportID)
	if err != nil {
		t.Fatal(err)
	}
	var res venturi.WorkflowResult
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if res, err = b.queue.EnqueueWorkflowTx(ctx, tx, tasks.NewImportWorkflow(task, tags)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO bookmark_import (id, job_id, workflow_id, tags, total) VALUES ($1, $2, $3, $4, $5)",
			imp, uuidOf(res.Jobs[tasks.ImportNodeImport]), uuidOf(res.ID), append([]string{}, tags...), len(urls)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO bookmark_import_item (import_id, position, url)
			SELECT $1, o - 1, u FROM unnest($2::text[]) WITH ORDINALITY AS x(u, o)`, imp, urls)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return task, res
}

// awaitWorkflow waits for the workflow to finish.
func (b *testBundle) awaitWorkflow(t *testing.T, id ulid.ULID) *venturi.WorkflowInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	info, err := b.queue.AwaitWorkflow(ctx, id)
	if err != nil {
		nodes, _ := b.queue.WorkflowNodes(context.Background(), id, "", 100)
		t.Fatalf("workflow %s: %v; nodes %+v", id, err, nodes)
	}
	return info
}

// summaryOf reads an import's summary row.
func (b *testBundle) summaryOf(t *testing.T, task tasks.ImportBookmarks) tasks.ImportSummary {
	t.Helper()
	imp, _ := parseID(task.ImportID)
	var s tasks.ImportSummary
	err := b.pool.QueryRow(context.Background(), `SELECT fetches, fetched, titles_found, failed, failures, gave_up, superseded, tag_index
		FROM bookmark_import_summary WHERE import_id = $1`, imp).
		Scan(&s.Fetches, &s.Fetched, &s.TitlesFound, &s.Failed, &s.Failures, &s.GaveUp, &s.Superseded, &s.TagIndex)
	if err != nil {
		t.Fatalf("summary of import %s: %v", task.ImportID, err)
	}
	return s
}

// TestImportWorkflowFetchesReindexesAndSummarizes: an import of six items (one the
// fetcher would not try, so five bookmarks) runs as its workflow: the import node creates
// the bookmarks without fetches and enqueues nothing, the fetch node spawns one fetch per
// bookmark (fetch/<bookmark id>, each bookmark pointed at its node's job), the reindex node
// recounts the import's tag once they all ended, and the summary node stores what they
// came to: three pages with a title, one without, one 410 (a verdict on the page).
func TestImportWorkflowFetchesReindexesAndSummarizes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	urls := []string{"https://1.example/", "https://2.example/", "javascript:alert(1)", "https://3.example/",
		"https://untitled.example/", "https://gone.example/"}
	b.fetcher.script["https://untitled.example/"] = []func() (*fetch.Result, error){ok("")}
	b.fetcher.script["https://gone.example/"] = []func() (*fetch.Result, error){
		fail(&fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 410, Permanent: true})}
	// A bookmark already fetched: the table's trigger enqueues nothing for it.
	if _, err := b.pool.Exec(ctx, "INSERT INTO bookmark (id, url, tags, fetch_status) VALUES ($1, 'https://mine.example/', '{wf}', 'fetched')", uuidOf(ulid.Make())); err != nil {
		t.Fatal(err)
	}
	task, res := b.newImportWorkflow(t, 2, []string{"wf"}, urls...)
	b.start(t)
	if info := b.awaitWorkflow(t, res.ID); info.State != venturi.WorkflowSucceeded || info.Key != tasks.ImportWorkflowKey(task.ImportID) {
		t.Fatalf("workflow %+v", info)
	}

	// The import node imported the items page by page and output its final checkpoint.
	final := tasks.ImportCarry{Next: 6, Imported: 5, Skipped: 1, Pages: 3}
	j := b.waitJob(t, res.Jobs[tasks.ImportNodeImport], venturi.StateCompleted)
	if got := events(j); !slices.Equal(got, []venturi.Event{venturi.EventPaused, venturi.EventPaused, venturi.EventPaused, venturi.EventCompleted}) {
		t.Fatalf("import journal %v", got)
	}
	var carry tasks.ImportCarry
	if err := b.queue.WorkflowOutput(ctx, res.ID, tasks.ImportNodeImport, &carry); err != nil || carry != final {
		t.Fatalf("import output %+v (%v), want %+v", carry, err, final)
	}
	if status, n, _ := b.importState(t, task); status != "done" || n != 5 {
		t.Fatalf("import %s with %d bookmarks", status, n)
	}

	// The nodes: fetch spawned one fetch per bookmark, which the bookmark names; nothing
	// of the import was enqueued outside the workflow.
	nodes, err := b.queue.WorkflowNodes(ctx, res.ID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	imp, _ := parseID(task.ImportID)
	rows, _ := b.pool.Query(ctx, "SELECT id, fetch_job_id, fetch_status FROM bookmark WHERE import_id = $1", imp)
	type bookmarkRow struct {
		ID, Job pgtype.UUID
		Status  string
	}
	bookmarks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[bookmarkRow])
	if err != nil {
		t.Fatal(err)
	}
	jobOf := map[string]ulid.ULID{}
	var names []string
	var members []pgtype.UUID
	for _, n := range nodes {
		names = append(names, n.Name)
		members = append(members, uuidOf(n.JobID))
		if bid, ok := strings.CutPrefix(n.Name, tasks.ImportNodeFetch+"/"); ok {
			if n.In != tasks.ImportNodeFetch || n.JobState != venturi.StateCompleted {
				t.Fatalf("spawned node %+v", n)
			}
			jobOf[bid] = n.JobID
		}
	}
	if len(nodes) != 4+len(bookmarks) || len(jobOf) != len(bookmarks) {
		t.Fatalf("nodes %q for %d bookmarks", names, len(bookmarks))
	}
	for _, bm := range bookmarks {
		if job := jobOf[ulid.ULID(bm.ID.Bytes).String()]; bm.Job != uuidOf(job) || bm.Status == "pending" {
			t.Fatalf("bookmark %s: fetch job %s (%s), want its node's %s", ulid.ULID(bm.ID.Bytes), ulid.ULID(bm.Job.Bytes), bm.Status, job)
		}
	}
	var outside int
	if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM venturi_job_all WHERE kind IN ($1, $2) AND NOT id = ANY($3)",
		tasks.KindFetchBookmark, tasks.KindRebuildTagIndex, members).Scan(&outside); err != nil || outside != 0 {
		t.Fatalf("%d fetches or rebuilds outside the workflow (%v)", outside, err)
	}

	// The recount covered the import's tag (its bookmarks and the one made by hand).
	var count int
	if err := b.pool.QueryRow(ctx, "SELECT bookmark_count FROM tag_index WHERE tag = 'wf'").Scan(&count); err != nil || count != 6 {
		t.Fatalf("tag wf counted %d (%v), want 6", count, err)
	}
	want := tasks.ImportSummary{Fetches: 5, Fetched: 4, TitlesFound: 3, Failed: 1, Failures: map[string]int{"http_status": 1},
		TagIndex: tasks.TagIndexRebuilt}
	if got := b.summaryOf(t, task); !reflect.DeepEqual(got, want) {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	var out tasks.ImportSummary
	if err := b.queue.WorkflowOutput(ctx, res.ID, tasks.ImportNodeSummary, &out); err != nil || !reflect.DeepEqual(out, want) {
		t.Fatalf("summary output %+v (%v)", out, err)
	}
	sj := b.waitJob(t, res.Jobs[tasks.ImportNodeSummary], venturi.StateCompleted)
	if note := sj.Journal[len(sj.Journal)-1].Note; note != "5 fetches: 4 fetched (3 with a title), 1 failed, 0 gave up, 0 superseded; tag index rebuilt" {
		t.Fatalf("summary note %q", note)
	}
}

// TestImportWorkflowSummarizesWhateverHappened: every edge of an import's workflow is
// NeedsEnded, so the summary is written however the steps before it ended. A fetch whose
// host keeps failing dies after its attempts: the workflow fails, and the summary counts
// it as given up. An import cancelled before it ran fetches nothing: the workflow is
// cancelled, and the summary says so.
func TestImportWorkflowSummarizesWhateverHappened(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.fetcher.script["https://down.example/"] = []func() (*fetch.Result, error){fail(&fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 500})}
	failing, failingRes := b.newImportWorkflow(t, 0, nil, "https://up.example/", "https://down.example/")
	cancelled, cancelledRes := b.newImportWorkflow(t, 0, []string{"never"}, "https://a.example/", "https://b.example/")
	if r, err := b.queue.Cancel(ctx, cancelledRes.Jobs[tasks.ImportNodeImport], "cancelled with API key 01KEY"); err != nil || r != venturi.CancelEnded {
		t.Fatalf("cancel = %v, %v", r, err)
	}
	b.start(t)

	if info := b.awaitWorkflow(t, failingRes.ID); info.State != venturi.WorkflowFailed {
		t.Fatalf("workflow with a dead fetch: %+v", info)
	}
	want := tasks.ImportSummary{Fetches: 2, Fetched: 1, TitlesFound: 1, Failures: map[string]int{}, GaveUp: 1, TagIndex: tasks.TagIndexRebuilt}
	if got := b.summaryOf(t, failing); !reflect.DeepEqual(got, want) {
		t.Fatalf("summary %+v, want %+v", got, want)
	}

	if info := b.awaitWorkflow(t, cancelledRes.ID); info.State != venturi.WorkflowCancelled {
		t.Fatalf("workflow of a cancelled import: %+v", info)
	}
	want = tasks.ImportSummary{Failures: map[string]int{}, TagIndex: tasks.TagIndexRebuilt}
	if got := b.summaryOf(t, cancelled); !reflect.DeepEqual(got, want) {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	if _, n, _ := b.importState(t, cancelled); n != 0 {
		t.Fatalf("the cancelled import made %d bookmarks", n)
	}
}

// TestSummarizeTalliesOutputs: the summary counts what the outputs say, and what they do
// not say: a fetch without an output gave up, a reason that is not a code is "other", and
// a missing recount output means the recount failed.
func TestSummarizeTalliesOutputs(t *testing.T) {
	t.Parallel()
	out := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	got := summarize(map[string]json.RawMessage{
		tasks.ImportNodeFetch: out(tasks.ImportFetchesOutput{Fetches: 7}),
		"fetch/a":             out(tasks.FetchOutput{Status: tasks.FetchStatusFetched, TitleFound: true}),
		"fetch/b":             out(tasks.FetchOutput{Status: tasks.FetchStatusFetched}),
		"fetch/c":             out(tasks.FetchOutput{Status: tasks.FetchStatusFailed, Reason: "dns"}),
		"fetch/d":             out(tasks.FetchOutput{Status: tasks.FetchStatusFailed, Reason: "10.0.0.1: refused"}),
		"fetch/e":             out(tasks.FetchOutput{Status: tasks.FetchStatusSuperseded}),
		"fetch/f":             json.RawMessage(`"not an output"`),
		"import":              out(tasks.ImportCarry{Next: 9}),
	})
	want := tasks.ImportSummary{Fetches: 7, Fetched: 2, TitlesFound: 1, Failed: 2, Failures: map[string]int{"dns": 1, "other": 1},
		GaveUp: 2, Superseded: 1, TagIndex: tasks.TagIndexFailed}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("summarize = %+v, want %+v", got, want)
	}
	// Without the fetch node's count (it failed), the fetches are counted from their outputs.
	if got := summarize(map[string]json.RawMessage{"fetch/a": out(tasks.FetchOutput{Status: tasks.FetchStatusFetched}),
		tasks.ImportNodeReindex: out(tasks.TagIndexOutput{Tags: 1, Chunk: 1})}); got.Fetches != 1 || got.GaveUp != 0 || got.TagIndex != tasks.TagIndexRebuilt {
		t.Fatalf("summarize without the fetch node's output = %+v", got)
	}
}

// TestFetchNodeSpawnsAFetchPerBookmark: the fetch node of an import of the most items the
// API takes (5,000) spawns a fetch per bookmark in the one transaction of its completion,
// and points each bookmark at its fetch; a bookmark a refetch reached first keeps that
// fetch. Only the fetch node runs here (the fetches wait, their kind not registered).
func TestFetchNodeSpawnsAFetchPerBookmark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 5000 // the API's MaxImportItems
	imp := ulid.Make()
	if _, err := b.pool.Exec(ctx, `INSERT INTO bookmark (id, url, import_id)
		SELECT gen_random_uuid(), 'https://h' || i || '.example/', $1 FROM generate_series(1, $2) AS i`, uuidOf(imp), n); err != nil {
		t.Fatal(err)
	}
	refetch := uuidOf(ulid.Make())
	if _, err := b.pool.Exec(ctx, `UPDATE bookmark SET fetch_job_id = $2
		WHERE id = (SELECT id FROM bookmark WHERE import_id = $1 ORDER BY id LIMIT 1)`, uuidOf(imp), refetch); err != nil {
		t.Fatal(err)
	}
	wf := venturi.NewWorkflow("fetch node alone")
	wf.Add(tasks.ImportNodeFetch, tasks.FetchImportedBookmarks{ImportID: imp.String()})
	res, err := b.queue.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	b.startWith(t, 1, 1, []Registration{RegisterFetchImportedBookmarks})
	j := b.waitJob(t, res.Jobs[tasks.ImportNodeFetch], venturi.StateCompleted)
	if note := j.Journal[len(j.Journal)-1].Note; note != "spawned 4999 fetches" {
		t.Fatalf("note %q", note)
	}
	var out tasks.ImportFetchesOutput
	if err := b.queue.WorkflowOutput(ctx, res.ID, tasks.ImportNodeFetch, &out); err != nil || out.Fetches != n-1 {
		t.Fatalf("output %+v (%v)", out, err)
	}
	var spawned, pointed, kept int
	if err := b.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM venturi_job_all j WHERE j.kind = $2 AND j.queue = $3),
		(SELECT count(*) FROM bookmark b JOIN venturi_job_all j ON j.id = b.fetch_job_id
		   WHERE b.import_id = $1 AND j.kind = $2),
		(SELECT count(*) FROM bookmark WHERE import_id = $1 AND fetch_job_id = $4)`,
		uuidOf(imp), tasks.KindFetchBookmark, tasks.QueueImports, refetch).Scan(&spawned, &pointed, &kept); err != nil {
		t.Fatal(err)
	}
	if spawned != n-1 || pointed != n-1 || kept != 1 {
		t.Fatalf("%d fetches spawned, %d bookmarks pointed at one, %d kept the refetch; want %d, %d, 1", spawned, pointed, kept, n-1, n-1)
	}
}
