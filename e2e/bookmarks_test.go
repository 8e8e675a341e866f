package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The scenarios run one at a time (no t.Parallel): several restart the processes.

func TestCreateThenFetched(t *testing.T) {
	b := create(t, sys.pageURL+"/page/hello", "e2e")
	if b.FetchStatus != "pending" || b.FetchJob == nil {
		t.Fatalf("created = %+v", b)
	}
	b = waitBookmark(t, b.ID, "fetched", fetchDeadline)
	if b.PageTitle != "Page hello" || !strings.Contains(b.ContentSummary, "Content of hello.") {
		t.Fatalf("fetched bookmark = %+v", b)
	}
	last := b.FetchJob.Journal[len(b.FetchJob.Journal)-1]
	var att struct {
		Status      int    `json:"status"`
		Bytes       int    `json:"bytes"`
		ContentType string `json:"content_type"`
		FinalURL    string `json:"final_url"`
	}
	if err := json.Unmarshal(last.Attachment, &att); err != nil || att.Status != 200 || att.Bytes == 0 ||
		att.ContentType != "text/html" || att.FinalURL != sys.pageURL+"/page/hello" {
		t.Fatalf("attachment = %s (%v)", last.Attachment, err)
	}
}

func TestRefetchBurstCoalesces(t *testing.T) {
	b := create(t, sys.pageURL+"/page/burst")
	waitBookmark(t, b.ID, "fetched", fetchDeadline)
	before := sys.pages.count("/page/burst")
	var jobs []string
	for i := range 10 {
		var r struct {
			JobID  string `json:"job_id"`
			Action string `json:"action"`
		}
		mustCall(t, "POST", "/bookmarks/"+b.ID+"/refetch", nil, 202, &r)
		jobs = append(jobs, r.JobID)
		if i > 0 && r.Action != "replaced" {
			t.Fatalf("refetch %d action = %s, want replaced (merged into the pending job)", i, r.Action)
		}
	}
	if len(slices.Compact(slices.Clone(jobs))) != 1 {
		t.Fatalf("refetch burst made jobs %v, want one", slices.Compact(jobs))
	}
	b = waitBookmark(t, b.ID, "fetched", fetchDeadline)
	if b.FetchJob.ID != jobs[0] || b.FetchJob.Runs != 1 {
		t.Fatalf("fetch job = %+v, want %s with one run", b.FetchJob, jobs[0])
	}
	merged := 0
	for _, e := range b.FetchJob.Journal {
		if e.Event == "merged" && e.Merge == "replace" {
			merged++
		}
	}
	if merged != 9 || sys.pages.count("/page/burst") != before+1 {
		t.Fatalf("merged entries = %d (want 9), page fetched %d more times (want 1)", merged, sys.pages.count("/page/burst")-before)
	}
	if b.FetchJob.JournalTotal != len(b.FetchJob.Journal) {
		t.Fatalf("journal_total = %d for %d entries (all shown: fewer than 20)", b.FetchJob.JournalTotal, len(b.FetchJob.Journal))
	}
}

// TestGoneEndsFailed: 410 is a verdict on the page, not the host's failure: the bookmark is
// failed at once and its job completes (an error would count against the host's breaker).
func TestGoneEndsFailed(t *testing.T) {
	b := create(t, sys.pageURL+"/gone")
	b = waitBookmark(t, b.ID, "failed", fetchDeadline)
	j := b.FetchJob
	if j.State != "completed" || len(j.Journal) != 1 || j.Journal[0].Event != "completed" || j.Journal[0].Note != "fetch failed: http_status 410" {
		t.Fatalf("job = %+v", j)
	}
	if b.FetchError != "http_status" || b.HTTPStatus == nil || *b.HTTPStatus != 410 {
		t.Fatalf("fetch_error = %q, http_status %v; want http_status 410", b.FetchError, b.HTTPStatus)
	}
}

func TestFlakySiteRetries(t *testing.T) {
	b := create(t, sys.pageURL+"/flaky/one")
	b = waitBookmark(t, b.ID, "fetched", fetchDeadline)
	if got := events(b.FetchJob.Journal); !slices.Equal(got, []string{"failed", "failed", "completed"}) || b.FetchJob.Runs != 3 {
		t.Fatalf("journal = %v, runs %d; want failed, failed, completed", got, b.FetchJob.Runs)
	}
	if b.PageTitle != "Page flaky" {
		t.Fatalf("page title = %q", b.PageTitle)
	}
}

func TestSSRFRefused(t *testing.T) {
	targets := map[string]string{
		"loopback":             "http://127.0.0.1/",
		"loopback other port":  "http://127.0.0.1:" + apiPort() + "/healthz",
		"metadata":             "http://169.254.169.254/latest/meta-data/",
		"private":              "http://10.0.0.1/",
		"redirect to metadata": sys.pageURL + "/redirect?to=" + url.QueryEscape("http://169.254.169.254/latest/meta-data/"),
		"redirect to private":  sys.pageURL + "/redirect?to=" + url.QueryEscape("http://10.0.0.1/"),
		"name to metadata":     "http://metadata.e2e.test/latest/meta-data/",
		"name to private":      "http://internal.e2e.test/",
		"localhost (loopback)": "http://localhost/",
		"ipv4-mapped metadata": "http://[::ffff:169.254.169.254]/",
	}
	ids := map[string]string{}
	for name, u := range targets {
		ids[name] = create(t, u).ID
	}
	for name, id := range ids {
		b := waitBookmark(t, id, "failed", fetchDeadline)
		// A code, no address: the journal shows what the bookmark shows.
		last := b.FetchJob.Journal[len(b.FetchJob.Journal)-1].Note
		if b.FetchJob.State != "completed" || b.FetchError != "blocked_address" || last != "fetch failed: blocked_address" {
			t.Errorf("%s (%s): status %s, error %q, job %s, note %q; want blocked_address, the job completed", name, targets[name],
				b.FetchStatus, b.FetchError, b.FetchJob.State, last)
		}
	}
}

func apiPort() string {
	u, _ := url.Parse(sys.apiURL)
	return u.Port()
}

func TestWorkerKilledMidFetch(t *testing.T) {
	arrived := sys.pages.waitArrived("crash")
	b := create(t, sys.pageURL+"/slow/crash")
	select {
	case <-arrived:
	case <-time.After(fetchDeadline):
		t.Fatal("the worker never started fetching")
	}
	if err := sys.worker.Kill(); err != nil {
		t.Fatal(err)
	}
	sys.pages.releaseKey("crash")
	if err := sys.worker.Start(); err != nil {
		t.Fatal(err)
	}
	b = waitBookmark(t, b.ID, "fetched", restartDeadline)
	if got := events(b.FetchJob.Journal); !slices.Equal(got, []string{"abandoned", "completed"}) {
		t.Fatalf("journal = %v, want abandoned then completed", got)
	}
}

func TestRestartsUnderLoseNothing(t *testing.T) {
	const n = 40
	// A key of its own: 40 creates at once spend its write burst (the 429s are retried
	// like the refusals of a restarting api), not the suite's.
	key, err := newKey(t.Context(), "restarts")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	createRetrying := func(i int) {
		defer wg.Done()
		deadline := time.Now().Add(restartDeadline)
		for {
			var b bookmark
			// Four hosts: fetches are polite per host (one start a second), so 40 fetches of
			// one host would take 40 seconds whatever the restarts.
			u := pageURL([]string{"127.0.0.1", "load1.e2e.test", "load2.e2e.test", "load3.e2e.test"}[i%4], fmt.Sprintf("/page/load-%d", i))
			resp, err := callAs(key, "POST", "/bookmarks", map[string]any{"url": u}, &b)
			code := 0
			if resp != nil {
				code = resp.StatusCode
			}
			if err == nil && code == 201 {
				mu.Lock()
				acked = append(acked, b.ID)
				mu.Unlock()
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("create %d never succeeded: %d %v", i, code, err)
				return
			}
			select { // the API is restarting: poll again
			case <-time.After(pollEvery):
			case <-t.Context().Done():
				return
			}
		}
	}
	for i := range n {
		wg.Add(1)
		go createRetrying(i)
		switch i {
		case n / 4:
			if err := sys.worker.Restart(); err != nil {
				t.Fatal(err)
			}
		case n / 2:
			if err := sys.api.Restart(); err != nil {
				t.Fatal(err)
			}
		case 3 * n / 4:
			if err := sys.worker.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := sys.worker.Start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	if err := waitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(acked) != n {
		t.Fatalf("%d of %d creates acknowledged", len(acked), n)
	}
	for _, id := range acked {
		waitBookmark(t, id, "fetched", restartDeadline)
	}
}

func TestImportPausesAndResumes(t *testing.T) {
	items := []map[string]string{}
	for i := range 7 {
		items = append(items, map[string]string{"url": fmt.Sprintf("%s/page/import-%d", sys.pageURL, i), "title": fmt.Sprint("item ", i)})
	}
	items[3]["url"] = "http://2130706433/" // accepted by the API (it does not judge addresses), skipped by the import
	var imp struct {
		ID       string `json:"id"`
		Status   string `json:"status"`
		Imported int    `json:"imported"`
		Skipped  int    `json:"skipped"`
		Job      *job   `json:"job"`
	}
	mustCall(t, "POST", "/imports", map[string]any{"items": items, "tags": []string{"imported"}, "page_size": 3}, 202, &imp)
	eventually(t, fetchDeadline, "import done", func() (bool, string) {
		code, err := call("GET", "/imports/"+imp.ID, nil, &imp)
		return err == nil && code == 200 && imp.Status == "done" && imp.Job != nil && imp.Job.State == "completed",
			fmt.Sprintf("%d %v %+v", code, err, imp)
	})
	if imp.Imported != 6 || imp.Skipped != 1 {
		t.Fatalf("import = %+v", imp)
	}
	if got := events(imp.Job.Journal); !slices.Equal(got, []string{"paused", "paused", "paused", "completed"}) {
		t.Fatalf("journal = %v, want paused three times (a page each), then completed", got)
	}
	// The carry the completed job shows has the import's final counts.
	var final struct {
		Next     int `json:"next"`
		Imported int `json:"imported"`
		Skipped  int `json:"skipped"`
		Pages    int `json:"pages"`
	}
	if err := json.Unmarshal(imp.Job.Carry, &final); err != nil || final.Next != 7 || final.Imported != 6 || final.Skipped != 1 || final.Pages != 3 {
		t.Fatalf("completed job's carry = %s (%v), want next 7, imported 6, skipped 1, pages 3", imp.Job.Carry, err)
	}
	var checkpoints []int
	for _, e := range imp.Job.Journal {
		var c struct {
			Next  int `json:"next"`
			Pages int `json:"pages"`
		}
		if err := json.Unmarshal(e.Attachment, &c); err != nil {
			t.Fatalf("attachment %s: %v", e.Attachment, err)
		}
		checkpoints = append(checkpoints, c.Next)
	}
	if !slices.Equal(checkpoints, []int{3, 6, 7, 7}) {
		t.Fatalf("checkpoints = %v, want 3, 6, 7, 7 (each run resumed from the carry)", checkpoints)
	}
	var list struct {
		Items []bookmark `json:"items"`
	}
	eventually(t, fetchDeadline, "imported bookmarks fetched", func() (bool, string) {
		mustCall(t, "GET", "/bookmarks?tag=imported&limit=100", nil, 200, &list)
		fetched := 0
		for _, b := range list.Items {
			if b.FetchStatus == "fetched" {
				fetched++
			}
		}
		return fetched == 6, fmt.Sprintf("%d of %d fetched", fetched, len(list.Items))
	})
}

func TestTagRebuildBurstMerges(t *testing.T) {
	create(t, sys.pageURL+"/page/tag-a", "merge-a")
	create(t, sys.pageURL+"/page/tag-b", "merge-b", "merge-c")
	var first string
	for i, tags := range [][]string{{"merge-a"}, {"merge-b"}, {"merge-c", "merge-a"}, {"merge-d"}, {"merge-b"}} {
		var r struct {
			JobID  string `json:"job_id"`
			Action string `json:"action"`
		}
		mustCall(t, "POST", "/tags/rebuild", map[string]any{"tags": tags}, 202, &r)
		if i == 0 {
			first = r.JobID
		} else if r.JobID != first || r.Action != "merged" {
			t.Fatalf("rebuild %d = %+v, want merged into %s", i, r, first)
		}
	}
	var state string
	var payload []byte
	var journal []journalEntry
	eventually(t, fetchDeadline, "merged rebuild completed", func() (bool, string) {
		state, payload, _, journal = jobRow(t, first)
		return state == "completed", state
	})
	var p struct {
		Tags     []string `json:"tags"`
		Requests int      `json:"requests"`
	}
	_ = json.Unmarshal(payload, &p)
	for _, want := range []string{"merge-a", "merge-b", "merge-c", "merge-d"} {
		if !slices.Contains(p.Tags, want) {
			t.Fatalf("merged payload %s lacks %s", payload, want)
		}
	}
	merged := 0
	for _, e := range journal {
		if e.Event == "merged" && e.Merge == "with" {
			merged++
		}
	}
	if merged < 4 || journal[len(journal)-1].Event != "completed" || p.Requests < 5 {
		t.Fatalf("journal = %+v, requests %d; want at least 4 with-merges and one run", journal, p.Requests)
	}
	var tags struct {
		Items []struct {
			Tag   string `json:"tag"`
			Count int    `json:"count"`
		} `json:"items"`
	}
	mustCall(t, "GET", "/tags", nil, 200, &tags)
	counts := map[string]int{}
	for _, it := range tags.Items {
		counts[it.Tag] = it.Count
	}
	if counts["merge-a"] != 1 || counts["merge-b"] != 1 || counts["merge-c"] != 1 || counts["merge-d"] != 0 {
		t.Fatalf("tag index = %v", counts)
	}
}

// TestWorkerWarnsOfTestOnlySettings: the suite's worker runs with test-only settings (a
// loopback port, static hosts), and the first thing it logs is a warning naming them.
func TestWorkerWarnsOfTestOnlySettings(t *testing.T) {
	eventually(t, fetchDeadline, "the worker's test-only warning", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(sys.logDir, "worker.log"))
		if err != nil {
			return false, err.Error()
		}
		_, rest, _ := strings.Cut(string(b), "\n") // after the "---- worker start" marker
		first, _, _ := strings.Cut(rest, "\n")
		var line struct {
			Level    string   `json:"level"`
			Msg      string   `json:"msg"`
			Settings []string `json:"test_only_settings"`
		}
		err = json.Unmarshal([]byte(first), &line)
		return err == nil && line.Level == "WARN" && strings.Contains(line.Msg, "TEST-ONLY SETTINGS ACTIVE") && len(line.Settings) == 2 &&
			strings.HasPrefix(line.Settings[0], "BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT=") &&
			strings.HasPrefix(line.Settings[1], "BOOKMARKS_FETCH_STATIC_HOSTS="), fmt.Sprintf("first line %q (%v)", first, err)
	})
}
