package e2e

import (
	"fmt"
	"testing"
	"time"
)

// Flow control through the real binaries: the page server answers for several host names
// (pageHosts, which the worker resolves to it), counts the requests in flight per host, and
// holds /held/ pages until a scenario releases them. Each scenario waits for observable
// states and asserts order and progress, not durations.

// TestFetchesArePolitePerHost: three bookmarks on each of two hosts, all held at the page
// server: each host gets two fetches at once, and its third waits (available, in the
// host's partition) until one of them ends.
func TestFetchesArePolitePerHost(t *testing.T) {
	hosts := []string{"a.e2e.test", "b.e2e.test"}
	ids := map[string][]string{}
	for i := range 3 {
		for _, h := range hosts {
			ids[h] = append(ids[h], create(t, pageURL(h, fmt.Sprintf("/held/polite/%s-%d", h, i))).ID)
		}
	}
	for _, h := range hosts {
		eventually(t, fetchDeadline, h+": two fetches at once", func() (bool, string) {
			in, peak, hits := sys.pages.hostCounts(h)
			return in == 2, fmt.Sprintf("%d in flight, most %d, %d requests", in, peak, hits)
		})
	}
	for _, h := range hosts {
		states := map[string]int{}
		for _, id := range ids[h] {
			var b bookmark
			mustCall(t, "GET", "/bookmarks/"+id, nil, 200, &b)
			states[b.FetchJob.State]++
			if b.FetchJob.Partition != h || b.FetchJob.Queue != "default" {
				t.Fatalf("fetch job of %s: partition %q, queue %q", h, b.FetchJob.Partition, b.FetchJob.Queue)
			}
		}
		if _, peak, hits := sys.pages.hostCounts(h); states["running"] != 2 || states["available"] != 1 || peak != 2 || hits != 2 {
			t.Fatalf("%s while held: jobs %v, %d requests, most %d at once; want 2 running and 1 waiting", h, states, hits, peak)
		}
	}
	sys.pages.releaseKey("held/polite")
	for _, h := range hosts {
		for _, id := range ids[h] {
			waitBookmark(t, id, "fetched", fetchDeadline)
		}
		if _, peak, hits := sys.pages.hostCounts(h); peak != 2 || hits != 3 {
			t.Fatalf("%s: %d requests, most %d at once; want 3, at most 2", h, hits, peak)
		}
	}
}

// TestFailingHostOpensItsBreaker: a host that answers 503 to everything opens its own
// circuit breaker after five failed fetches in a row; the API shows the open circuit on
// the fetches it holds back, the host gets no request while it is open, and a fetch of
// another host completes meanwhile.
func TestFailingHostOpensItsBreaker(t *testing.T) {
	var ids []string
	for i := range 3 {
		ids = append(ids, create(t, pageURL(downHost, fmt.Sprintf("/page/down-%d", i))).ID)
	}
	var held bookmark
	eventually(t, fetchDeadline, "the failing host's breaker to open", func() (bool, string) {
		state := ""
		for _, id := range ids {
			var b bookmark
			mustCall(t, "GET", "/bookmarks/"+id, nil, 200, &b)
			// A fetch that has failed (a bookmark whose fetch has not run yet is held back
			// too, with no failure to show; one that runs has no circuit on it).
			if c := b.FetchJob.Circuit; c != nil && c.State == "open" && b.FetchError != "" {
				held = b
				return true, ""
			}
			state += fmt.Sprintf("%s: %s after %d runs; ", id, b.FetchJob.State, b.FetchJob.Runs)
		}
		return false, state
	})
	c := held.FetchJob.Circuit
	if c.Failures < 5 || c.OpenUntil == nil || !c.OpenUntil.After(time.Now()) || held.FetchJob.Partition != downHost ||
		held.FetchStatus != "pending" || held.FetchError != "http_status" {
		t.Fatalf("held fetch: %+v, circuit %+v", held, c)
	}
	_, _, downHits := sys.pages.hostCounts(downHost)
	b := create(t, pageURL("a.e2e.test", "/page/while-down-is-open"))
	b = waitBookmark(t, b.ID, "fetched", fetchDeadline)
	if b.PageTitle != "Page while-down-is-open" {
		t.Fatalf("fetch of another host: %+v", b)
	}
	if _, _, hits := sys.pages.hostCounts(downHost); hits != downHits {
		t.Fatalf("the failing host got %d requests while its breaker was open", hits-downHits)
	}
	mustCall(t, "GET", "/bookmarks/"+held.ID, nil, 200, &held)
	if held.FetchJob.Circuit == nil || held.FetchJob.Circuit.State != "open" || held.FetchJob.State == "dead" {
		t.Fatalf("the held fetch after another host's fetch: %+v", held.FetchJob)
	}
}

// TestImportCannotStarveInteractiveFetches: an import and the fetches of its bookmarks run
// in the imports queue, whose two handlers (BOOKMARKS_WORKER_IMPORT_CONCURRENCY=2 here) the
// import's held fetches fill while three more wait. A bookmark created meanwhile is
// fetched, and the import has made no progress by then.
func TestImportCannotStarveInteractiveFetches(t *testing.T) {
	var items []map[string]string
	importHosts := []string{"i0.e2e.test", "i1.e2e.test", "i2.e2e.test", "i3.e2e.test", "i4.e2e.test"}
	for _, h := range importHosts {
		items = append(items, map[string]string{"url": pageURL(h, "/held/import/"+h)})
	}
	var imp struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Job    *job   `json:"job"`
	}
	mustCall(t, "POST", "/imports", map[string]any{"items": items, "tags": []string{"starve"}, "page_size": 10}, 202, &imp)
	if imp.Job.Queue != "imports" {
		t.Fatalf("import job in queue %q", imp.Job.Queue)
	}
	importCounts := func() (inflight, hits int) {
		for _, h := range importHosts {
			in, _, n := sys.pages.hostCounts(h)
			inflight, hits = inflight+in, hits+n
		}
		return
	}
	eventually(t, fetchDeadline, "both import handlers busy", func() (bool, string) {
		in, hits := importCounts()
		return in == 2, fmt.Sprintf("%d import fetches in flight, %d requests", in, hits)
	})
	b := create(t, pageURL("me.e2e.test", "/page/interactive"))
	b = waitBookmark(t, b.ID, "fetched", fetchDeadline)
	if b.FetchJob.Queue != "default" {
		t.Fatalf("interactive fetch in queue %q", b.FetchJob.Queue)
	}
	if in, hits := importCounts(); in != 2 || hits != 2 {
		t.Fatalf("while the interactive fetch ran, the import had %d fetches in flight and %d requests; want 2 and 2", in, hits)
	}
	var list struct {
		Items []bookmark `json:"items"`
	}
	mustCall(t, "GET", "/bookmarks?tag=starve&limit=100", nil, 200, &list)
	if len(list.Items) != len(importHosts) {
		t.Fatalf("%d imported bookmarks", len(list.Items))
	}
	for _, it := range list.Items {
		var ib bookmark
		mustCall(t, "GET", "/bookmarks/"+it.ID, nil, 200, &ib)
		if ib.FetchStatus != "pending" || ib.FetchJob.Queue != "imports" {
			t.Fatalf("imported bookmark %s: %s, fetch job in queue %q", ib.URL, ib.FetchStatus, ib.FetchJob.Queue)
		}
	}
	sys.pages.releaseKey("held/import")
	eventually(t, fetchDeadline, "import done", func() (bool, string) {
		code, err := call("GET", "/imports/"+imp.ID, nil, &imp)
		return err == nil && code == 200 && imp.Status == "done", fmt.Sprintf("%d %v %s", code, err, imp.Status)
	})
	for _, it := range list.Items {
		waitBookmark(t, it.ID, "fetched", fetchDeadline)
	}
}
