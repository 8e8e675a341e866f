package e2e

// An import as a venturi workflow, through the real binaries: the import of the items,
// one fetch per bookmark, the tag recount (a chunked rebuild), the summary.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

type importSummary struct {
	Fetches      int            `json:"fetches"`
	Fetched      int            `json:"fetched"`
	TitlesFound  int            `json:"titles_found"`
	Failed       int            `json:"failed"`
	Failures     map[string]int `json:"failures"`
	GaveUp       int            `json:"gave_up"`
	Superseded   int            `json:"superseded"`
	TagIndex     string         `json:"tag_index"`
	SummarizedAt *time.Time     `json:"summarized_at"`
}

type workflowImport struct {
	importView
	Workflow *struct {
		ID         string     `json:"id"`
		State      string     `json:"state"`
		FinishedAt *time.Time `json:"finished_at"`
	} `json:"workflow"`
	Summary *importSummary `json:"summary"`
}

// TestImportRunsAsAWorkflow: POST /imports answers with the import's workflow open; the
// worker imports the five items (one it skips), fetches the four bookmarks (three pages,
// one 410), recounts the import's tag once the fetches ended, and writes the summary:
// GET /imports/{id} then shows the workflow succeeded and the summary. The tag index
// counts the four bookmarks, and the recount's job says which chunk it rode.
func TestImportRunsAsAWorkflow(t *testing.T) {
	tag := "workflow-" + strings.ToLower(ulid.Make().String()) // its own, however often the suite runs
	items := []map[string]string{
		{"url": pageURL("wf1.e2e.test", "/page/wf-0")},
		{"url": pageURL("wf2.e2e.test", "/page/wf-1")},
		{"url": "http://2130706433/"}, // accepted by the API (it does not judge addresses), skipped by the import
		{"url": pageURL("wf1.e2e.test", "/page/wf-2")},
		{"url": pageURL("wf2.e2e.test", "/gone")},
	}
	var imp workflowImport
	mustCall(t, "POST", "/imports", map[string]any{"items": items, "tags": []string{tag}, "page_size": 2}, 202, &imp)
	if imp.Workflow == nil || imp.Workflow.State != "open" || imp.Workflow.ID == "" || imp.Summary != nil || imp.Job == nil ||
		imp.Job.Kind != "import_bookmarks" {
		t.Fatalf("created %+v, workflow %+v", imp.importView, imp.Workflow)
	}
	eventually(t, fetchDeadline, "the import's workflow succeeded with its summary", func() (bool, string) {
		code, err := call("GET", "/imports/"+imp.ID, nil, &imp)
		return err == nil && code == 200 && imp.Workflow != nil && imp.Workflow.State == "succeeded" && imp.Summary != nil,
			fmt.Sprintf("%d %v status %s workflow %+v summary %+v", code, err, imp.Status, imp.Workflow, imp.Summary)
	})
	if imp.Status != "done" || imp.Imported != 4 || imp.Skipped != 1 || imp.Job.State != "completed" || imp.Workflow.FinishedAt == nil {
		t.Fatalf("import %+v, job %+v, workflow %+v", imp.importView, imp.Job, imp.Workflow)
	}
	s := *imp.Summary
	if s.Fetches != 4 || s.Fetched != 3 || s.TitlesFound != 3 || s.Failed != 1 || len(s.Failures) != 1 || s.Failures["http_status"] != 1 ||
		s.GaveUp != 0 || s.Superseded != 0 || s.TagIndex != "rebuilt" || s.SummarizedAt == nil {
		t.Fatalf("summary %+v", s)
	}

	// Every bookmark of the import has its fetch, in the imports queue, ended.
	var list struct {
		Items []bookmark `json:"items"`
	}
	mustCall(t, "GET", "/bookmarks?tag="+tag+"&limit=100", nil, 200, &list)
	statuses := map[string]int{}
	for _, it := range list.Items {
		var b bookmark
		mustCall(t, "GET", "/bookmarks/"+it.ID, nil, 200, &b)
		if b.FetchJob == nil || b.FetchJob.Queue != "imports" || b.FetchJob.State != "completed" {
			t.Fatalf("bookmark %s: %s, fetch job %+v", b.URL, b.FetchStatus, b.FetchJob)
		}
		statuses[b.FetchStatus]++
	}
	if len(list.Items) != 4 || statuses["fetched"] != 3 || statuses["failed"] != 1 {
		t.Fatalf("%d bookmarks, fetch statuses %v", len(list.Items), statuses)
	}

	// The recount ran once the fetches ended: the index counts the import's bookmarks.
	var tags struct {
		Items []struct {
			Tag   string `json:"tag"`
			Count int    `json:"count"`
		} `json:"items"`
	}
	mustCall(t, "GET", "/tags?limit=1000", nil, 200, &tags)
	count := -1
	for _, it := range tags.Items {
		if it.Tag == tag {
			count = it.Count
		}
	}
	if count != 4 {
		t.Fatalf("tag %s counted %d in %+v, want 4", tag, count, tags.Items)
	}
	// The reindex node is a rebuild job, handled in a chunk (read-only SQL on the job).
	var state string
	var raw []byte
	if err := sys.db.Pool.QueryRow(t.Context(), `SELECT state::text, journal FROM venturi_job_all
		WHERE kind = 'rebuild_tag_index' AND payload->'tags' @> to_jsonb(ARRAY[$1::text])`, tag).Scan(&state, &raw); err != nil {
		t.Fatalf("the import's reindex job: %v", err)
	}
	var journal []journalEntry
	if err := json.Unmarshal(raw, &journal); err != nil || len(journal) == 0 {
		t.Fatalf("reindex journal %s (%v)", raw, err)
	}
	last := journal[len(journal)-1]
	var att struct {
		Tags  []string `json:"tags"`
		Chunk int      `json:"chunk"`
	}
	if err := json.Unmarshal(last.Attachment, &att); err != nil || state != "completed" || !strings.HasPrefix(last.Note, "recounted ") ||
		att.Chunk < 1 || len(att.Tags) != 1 || att.Tags[0] != tag {
		t.Fatalf("reindex job %s: note %q, attachment %s (%v)", state, last.Note, last.Attachment, err)
	}
}
