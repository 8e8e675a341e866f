package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBulkLoadFromSQL: an operator loads bookmarks with psql's \copy, beside the API; the
// table's trigger enqueues each row's fetch and the tag-index rebuild in the load's
// transaction, the worker fetches every one as it does the API's, and the rebuild, which
// collides with a pending one the API enqueued, is merged into it by the worker (a
// deferred merge): one rebuild of the union of the tags.
func TestBulkLoadFromSQL(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql is not in PATH: %v", err)
	}
	ctx := t.Context()
	// No rebuild pending (an earlier scenario's has run), so that the API's below is new
	// and waits long enough for the load's to collide with it.
	eventually(t, fetchDeadline, "no tag-index rebuild pending", func() (bool, string) {
		var n int
		err := sys.db.Pool.QueryRow(ctx, `SELECT count(*) FROM venturi_job
			WHERE kind = 'rebuild_tag_index' AND state IN ('scheduled', 'available', 'running')`).Scan(&n)
		return err == nil && n == 0, fmt.Sprintf("%d pending (%v)", n, err)
	})
	var rebuild struct {
		JobID  string `json:"job_id"`
		Action string `json:"action"`
	}
	mustCall(t, "POST", "/tags/rebuild", map[string]any{"tags": []string{"bulk-api"}, "delay_ms": 600_000}, 202, &rebuild)

	const rows = 9
	var file strings.Builder
	for i := range rows {
		fmt.Fprintf(&file, "%s\tloaded %d\t{bulk-sql}\n", pageURL(fmt.Sprintf("bulk%d.e2e.test", i%3+1), fmt.Sprintf("/page/bulk-%d", i)), i)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bookmarks.tsv"), []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(sys.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	schema := q.Get("search_path")
	q.Del("search_path") // libpq takes it as an option, not in the URL
	u.RawQuery = q.Encode()
	cmd := exec.CommandContext(ctx, psql, "-X", "-v", "ON_ERROR_STOP=1", "-c", `\copy bookmark (url, title, tags) FROM 'bookmarks.tsv'`, u.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+schema)
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != fmt.Sprintf("COPY %d", rows) {
		t.Fatalf("psql \\copy: %v\n%s", err, out)
	}

	var list struct {
		Items []bookmark `json:"items"`
	}
	mustCall(t, "GET", "/bookmarks?tag=bulk-sql&limit=100", nil, 200, &list)
	if len(list.Items) != rows {
		t.Fatalf("GET /bookmarks?tag=bulk-sql lists %d bookmarks, want %d", len(list.Items), rows)
	}
	for _, it := range list.Items {
		b := waitBookmark(t, it.ID, "fetched", fetchDeadline)
		name := strings.TrimPrefix(b.URL[strings.LastIndex(b.URL, "/"):], "/")
		if b.PageTitle != "Page "+name || b.FetchJob.State != "completed" || b.FetchJob.Runs != 1 || b.FetchJob.Partition == "" {
			t.Fatalf("loaded bookmark = %+v, job %+v", b, b.FetchJob)
		}
	}

	var payload []byte
	var journal []journalEntry
	eventually(t, fetchDeadline, "the merged rebuild completed", func() (bool, string) {
		var state string
		state, payload, _, journal = jobRow(t, rebuild.JobID)
		return state == "completed", state
	})
	var p struct {
		Tags     []string `json:"tags"`
		Requests int      `json:"requests"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p.Tags, "bulk-api") || !slices.Contains(p.Tags, "bulk-sql") || p.Requests != 2 ||
		!slices.ContainsFunc(journal, func(e journalEntry) bool { return e.Event == "merged" && e.Merge == "with" }) {
		t.Fatalf("rebuild %s: payload %s, journal %+v; want the load's tags merged in (with)", rebuild.JobID, payload, journal)
	}
	var tags struct {
		Items []struct {
			Tag   string `json:"tag"`
			Count int    `json:"count"`
		} `json:"items"`
	}
	mustCall(t, "GET", "/tags", nil, 200, &tags)
	if !slices.ContainsFunc(tags.Items, func(it struct {
		Tag   string `json:"tag"`
		Count int    `json:"count"`
	}) bool {
		return it.Tag == "bulk-sql" && it.Count == rows
	}) {
		t.Fatalf("tag index = %+v, want bulk-sql counted %d", tags.Items, rows)
	}
}
