package httpapi

// An import is a venturi workflow (tasks.NewImportWorkflow), and GET /imports/{id} shows
// its state and the summary its last node writes. Against a real PostgreSQL and a real
// venturi worker with stand-in handlers (the real ones are bookmarks-worker's; the e2e
// suite runs those).

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// startWorkflowWorker runs a worker whose stand-in handlers complete every node of an
// import's workflow at once; the summary node writes summary as the import's summary row.
func (b *testBundle) startWorkflowWorker(t *testing.T, summary tasks.ImportSummary) {
	t.Helper()
	w, err := venturi.NewWorker(b.pool, struct{}{}, venturi.Config{
		Queues:       []venturi.WorkerQueue{{Name: venturi.DefaultQueue, Concurrency: 2}, {Name: tasks.QueueImports, Concurrency: 2}},
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	regs := []error{
		venturi.RegisterFunc(w, func(context.Context, tasks.ImportBookmarks, *venturi.Run[tasks.ImportCarry], struct{}) (venturi.Outcome, error) {
			return venturi.Completed(), nil
		}),
		venturi.RegisterFunc(w, func(context.Context, tasks.FetchImportedBookmarks, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
			return venturi.Completed(), nil
		}),
		venturi.RegisterFunc(w, func(context.Context, tasks.RebuildTagIndex, *venturi.Run[tasks.TagIndexCarry], struct{}) (venturi.Outcome, error) {
			return venturi.Completed(), nil
		}),
		venturi.RegisterFunc(w, func(ctx context.Context, s tasks.SummarizeImport, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
			id, err := ulid.ParseStrict(s.ImportID)
			if err != nil {
				return venturi.Outcome{}, venturi.Permanent(err)
			}
			failures, _ := json.Marshal(summary.Failures)
			_, err = b.pool.Exec(ctx, `INSERT INTO bookmark_import_summary
				(import_id, fetches, fetched, titles_found, failed, failures, gave_up, superseded, tag_index)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, uuidOf(id), summary.Fetches, summary.Fetched, summary.TitlesFound,
				summary.Failed, failures, summary.GaveUp, summary.Superseded, summary.TagIndex)
			return venturi.Completed(), err
		}),
	}
	for _, err := range regs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

// TestImportIsAWorkflowWithASummary: POST /imports enqueues the import's workflow in its
// transaction (its job is the workflow's import node; the fetch, reindex and summary nodes
// wait for it), and GET /imports/{id} shows the workflow's state, then, once the summary
// node has written it, the summary.
func TestImportIsAWorkflowWithASummary(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	code, imp := b.do(t, "POST", "/imports", `{"items":[{"url":"https://a.example/"},{"url":"https://b.example/"}],"tags":["go","db"]}`)
	wf, _ := imp["workflow"].(map[string]any)
	if code != 202 || wf == nil || wf["state"] != "open" || imp["summary"] != nil || importJob(imp)["kind"] != tasks.KindImportBookmarks {
		t.Fatalf("create import = %d %s", code, mustJSON(imp))
	}
	wfID, err := ulid.ParseStrict(wf["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.api.queue.Workflow(ctx, wfID)
	if err != nil || info.Key != tasks.ImportWorkflowKey(imp["id"].(string)) {
		t.Fatalf("workflow %+v (%v)", info, err)
	}
	nodes, err := b.api.queue.WorkflowNodes(ctx, wfID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]venturi.NodeInfo{}
	for _, n := range nodes {
		state[n.Name] = n
	}
	if len(nodes) != 4 || state[tasks.ImportNodeImport].JobID.String() != importJob(imp)["id"] ||
		state[tasks.ImportNodeFetch].JobState != venturi.StateBlocked || state[tasks.ImportNodeSummary].JobState != venturi.StateBlocked {
		t.Fatalf("nodes %+v", nodes)
	}
	j, err := b.api.queue.Job(ctx, state[tasks.ImportNodeReindex].JobID)
	if err != nil {
		t.Fatal(err)
	}
	var reindex tasks.RebuildTagIndex
	if err := json.Unmarshal(j.Payload, &reindex); err != nil || len(reindex.Tags) != 2 || reindex.Tags[0] != "db" {
		t.Fatalf("reindex payload %s (%v), want the import's tags", j.Payload, err)
	}

	b.startWorkflowWorker(t, tasks.ImportSummary{Fetches: 2, Fetched: 1, TitlesFound: 1, Failed: 1,
		Failures: map[string]int{"http_status": 1}, TagIndex: tasks.TagIndexRebuilt})
	var got map[string]any
	eventually(t, "the import's workflow succeeded with its summary", func() (bool, string) {
		var code int
		code, got = b.do(t, "GET", "/imports/"+imp["id"].(string), "")
		wf, _ := got["workflow"].(map[string]any)
		return code == 200 && wf != nil && wf["state"] == "succeeded" && wf["finished_at"] != nil, mustJSON(got)
	})
	s, _ := got["summary"].(map[string]any)
	if s == nil || s["fetches"] != float64(2) || s["fetched"] != float64(1) || s["titles_found"] != float64(1) || s["failed"] != float64(1) ||
		mustJSON(s["failures"]) != `{"http_status":1}` || s["gave_up"] != float64(0) || s["superseded"] != float64(0) ||
		s["tag_index"] != "rebuilt" || s["summarized_at"] == nil {
		t.Fatalf("summary %s", mustJSON(got))
	}
	// The job shown is the import node's: done with the items.
	if importJob(got)["state"] != "completed" {
		t.Fatalf("import job %s", mustJSON(got))
	}
}

// TestImportWithoutWorkflow: an import made before imports were workflows (no workflow_id)
// shows neither a workflow nor a summary; one whose workflow venturi has pruned shows its
// summary without the workflow.
func TestImportWithoutWorkflow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old, pruned := ulid.Make(), ulid.Make()
	for _, id := range []ulid.ULID{old, pruned} {
		if _, err := b.pool.Exec(ctx, "INSERT INTO bookmark_import (id, job_id, total, status) VALUES ($1, $2, 1, 'done')",
			uuidOf(id), uuidOf(ulid.Make())); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(ctx, "UPDATE bookmark_import SET workflow_id = $2 WHERE id = $1", uuidOf(pruned), uuidOf(ulid.Make())); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO bookmark_import_summary (import_id, fetches, fetched, titles_found, failed, gave_up, superseded, tag_index)
		VALUES ($1, 1, 1, 0, 0, 0, 0, 'rebuilt')`, uuidOf(pruned)); err != nil {
		t.Fatal(err)
	}
	if code, got := b.do(t, "GET", "/imports/"+old.String(), ""); code != 200 || got["workflow"] != nil || got["summary"] != nil || got["job"] != nil {
		t.Fatalf("an import made before workflows = %d %s", code, mustJSON(got))
	}
	code, got := b.do(t, "GET", "/imports/"+pruned.String(), "")
	if s, _ := got["summary"].(map[string]any); code != 200 || got["workflow"] != nil || s == nil || s["fetched"] != float64(1) ||
		mustJSON(s["failures"]) != `{}` {
		t.Fatalf("an import whose workflow was pruned = %d %s", code, mustJSON(got))
	}
}

// TestImportSummaryErrorsDoNotLeak: a summary that cannot be read (its table gone) is a
// 500 saying "internal error", the cause logged, not sent.
func TestImportSummaryErrorsDoNotLeak(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, imp := b.do(t, "POST", "/imports", `{"items":[{"url":"https://a.example/"}]}`)
	if code != 202 {
		t.Fatalf("create import = %d %v", code, imp)
	}
	if _, err := b.pool.Exec(context.Background(), "ALTER TABLE bookmark_import_summary RENAME TO bookmark_import_summary_gone"); err != nil {
		t.Fatal(err)
	}
	code, got := b.do(t, "GET", "/imports/"+imp["id"].(string), "")
	if msg := got["error"].(map[string]any)["message"]; code != 500 || msg != "internal error" {
		t.Fatalf("GET with the summaries gone = %d %v", code, got)
	}
	if !strings.Contains(b.logs.String(), "bookmark_import_summary") {
		t.Fatalf("the cause was not logged: %s", b.logs.String())
	}
}
