package handlers

// Flow control as the app uses it, through a real worker, the real fetcher and a local
// server that answers for several host names: politeness per host (tasks.FetchBookmark's
// slot, partition and limits), a breaker per host, and the imports queue. Every test waits
// for observable states with a deadline and asserts order and progress, never durations
// (the per-host rate is checked on the database clock's start times, as venturi's own
// tests do).

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// hostServer answers for several host names on one loopback listener; the fetcher
// reaches every name through its test-only StaticHosts and AllowLoopbackPort. It counts,
// per host (the Host header without the port), the requests in flight, the most at once
// and all of them. A held host's requests wait until release; a host with a status
// answers it instead of a page.
type hostServer struct {
	port int

	mu       sync.Mutex
	inflight map[string]int
	peak     map[string]int
	hits     map[string]int
	held     map[string]chan struct{}
	status   map[string]int
}

// newHostServer starts the server and points b's fetcher at it for hosts.
func newHostServer(t *testing.T, b *testBundle, hosts ...string) *hostServer {
	t.Helper()
	s := &hostServer{inflight: map[string]int{}, peak: map[string]int{}, hits: map[string]int{},
		held: map[string]chan struct{}{}, status: map[string]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.releaseAll) // before srv.Close: held requests must end for it to return
	u, _ := url.Parse(srv.URL)
	s.port, _ = strconv.Atoi(u.Port())
	static := map[string]netip.Addr{}
	for _, h := range hosts {
		static[h] = netip.MustParseAddr("127.0.0.1")
	}
	b.app.Fetcher = fetch.New(fetch.Config{AllowLoopbackPort: uint16(s.port), StaticHosts: static, Timeout: 10 * time.Second})
	return s
}

// url is a page of host on the server.
func (s *hostServer) url(host, path string) string {
	return fmt.Sprintf("http://%s:%d/%s", host, s.port, path)
}

func (s *hostServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	s.mu.Lock()
	s.hits[host]++
	s.inflight[host]++
	s.peak[host] = max(s.peak[host], s.inflight[host])
	hold, status := s.held[host], s.status[host]
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight[host]--
		s.mu.Unlock()
	}()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprintf(w, "<title>%s%s</title>", host, r.URL.Path)
}

// hold makes host's requests wait until release.
func (s *hostServer) hold(hosts ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hosts {
		s.held[h] = make(chan struct{})
	}
}

func (s *hostServer) releaseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, c := range s.held {
		close(c)
		delete(s.held, h)
	}
}

// counts returns host's requests in flight, the most at once, and all of them.
func (s *hostServer) counts(host string) (inflight, peak, hits int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight[host], s.peak[host], s.hits[host]
}

// eventually polls cond until it holds, failing the test with what it says after 15s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, state)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// job reads a job.
func (b *testBundle) job(t *testing.T, id ulid.ULID) *venturi.Job {
	t.Helper()
	j, err := b.queue.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// circuit returns the breaker of the fetches of host, or nil before it saw a claim.
func (b *testBundle) circuit(t *testing.T, host string) *venturi.Circuit {
	t.Helper()
	cs, err := b.queue.Circuits(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Kind == tasks.KindFetchBookmark && c.Partition == host {
			return &c
		}
	}
	return nil
}

// TestFetchesArePolitePerHost: twelve fetches of three hosts, on a worker with eight
// handlers: each host gets at most FetchHostConcurrency (2) fetches at once while the
// others of the host wait, the hosts run side by side, and the starts of one host are at
// least FetchHostRatePer apart.
func TestFetchesArePolitePerHost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hosts := []string{"a.polite.test", "b.polite.test", "c.polite.test"}
	srv := newHostServer(t, b, hosts...)
	srv.hold(hosts...)
	b.startQueues(t, 8, 1)
	byHost := map[string][]ulid.ULID{}
	for i := range 4 {
		for _, h := range hosts {
			// Upper case and a port: the host is normalized into one partition.
			u := srv.url(h, fmt.Sprintf("page-%d", i))
			if i == 3 {
				u = srv.url(strings.ToUpper(h), "page-3")
			}
			_, job := b.bookmark(t, u)
			byHost[h] = append(byHost[h], job)
		}
	}
	// Held, each host has two fetches at the server and two waiting for its slot.
	for _, h := range hosts {
		eventually(t, h+"'s two fetches at once", func() (bool, string) {
			in, peak, hits := srv.counts(h)
			return in == 2, fmt.Sprintf("%d in flight (most %d, %d requests)", in, peak, hits)
		})
	}
	for _, h := range hosts {
		states := map[venturi.State]int{}
		for _, id := range byHost[h] {
			j := b.job(t, id)
			states[j.State]++
			if j.Partition != h || j.Slot == nil || *j.Slot != (venturi.Slot{Key: "host:" + h, Limit: 2, Policy: venturi.SlotQueue}) {
				t.Fatalf("job %s: partition %q slot %+v, want %q and host:%s limit 2", id, j.Partition, j.Slot, h, h)
			}
		}
		if _, peak, hits := srv.counts(h); states[venturi.StateRunning] != 2 || states[venturi.StateAvailable] != 2 || peak != 2 || hits != 2 {
			t.Fatalf("%s while its fetches are held: jobs %v, %d requests, most %d at once; want 2 running, 2 waiting", h, states, hits, peak)
		}
	}
	srv.releaseAll()
	for _, h := range hosts {
		var starts []time.Time
		for _, id := range byHost[h] {
			j := b.waitJob(t, id, venturi.StateCompleted)
			starts = append(starts, j.Journal[len(j.Journal)-1].StartedAt)
		}
		if _, peak, hits := srv.counts(h); peak != 2 || hits != 4 {
			t.Fatalf("%s: %d requests, most %d at once; want 4, at most 2", h, hits, peak)
		}
		sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
		for i := 1; i < len(starts); i++ {
			if d := starts[i].Sub(starts[i-1]); d < tasks.FetchHostRatePer {
				t.Fatalf("%s: two fetches started %v apart (rate %d per %v): %v", h, d, tasks.FetchHostRate, tasks.FetchHostRatePer, starts)
			}
		}
	}
}

// TestFailingHostOpensOnlyItsBreaker: a host that answers 503 opens its own breaker after
// FetchBreakerFailures failed fetches in a row; its fetches then wait, unrun and with their
// attempts intact, while another host's fetches complete. A host whose pages are gone (404)
// never opens its breaker: a verdict on a page completes the job without an error.
func TestFailingHostOpensOnlyItsBreaker(t *testing.T) {
	t.Parallel()
	b := setup(t) // MaxFetchAttempts 3: three fetches of the failing host can fail 9 times
	srv := newHostServer(t, b, "down.breaker.test", "gone.breaker.test", "up.breaker.test")
	srv.status["down.breaker.test"] = http.StatusServiceUnavailable
	srv.status["gone.breaker.test"] = http.StatusNotFound
	b.start(t)
	var down, gone []ulid.ULID
	for i := range 3 {
		_, job := b.bookmark(t, srv.url("down.breaker.test", fmt.Sprint("p", i)))
		down = append(down, job)
	}
	for i := range tasks.FetchBreakerFailures + 1 {
		_, job := b.bookmark(t, srv.url("gone.breaker.test", fmt.Sprint("p", i)))
		gone = append(gone, job)
	}
	eventually(t, "the failing host's breaker to open", func() (bool, string) {
		c := b.circuit(t, "down.breaker.test")
		return c != nil && c.State == venturi.CircuitOpen, fmt.Sprintf("%+v", c)
	})
	c := b.circuit(t, "down.breaker.test")
	if c.Failures < tasks.FetchBreakerFailures || c.Threshold != tasks.FetchBreakerFailures ||
		c.OpenUntil == nil || time.Until(*c.OpenUntil) > tasks.FetchBreakerCooldown {
		t.Fatalf("open circuit %+v, want %d failures for a cooldown of %v", *c, tasks.FetchBreakerFailures, tasks.FetchBreakerCooldown)
	}
	_, _, downHits := srv.counts("down.breaker.test")
	waiting := map[ulid.ULID]int{} // the failing host's fetches still pending, and their runs
	for _, id := range down {
		if j := b.job(t, id); j.State != venturi.StateDead {
			waiting[id] = j.RunCount
		}
	}
	if len(waiting) == 0 {
		t.Fatal("every fetch of the failing host died before its breaker opened")
	}

	// Another host is unaffected: its fetches run and complete while the breaker is open.
	for i := range 3 {
		id, job := b.bookmark(t, srv.url("up.breaker.test", fmt.Sprint("p", i)))
		b.waitJob(t, job, venturi.StateCompleted)
		if status, title, _, _ := b.row(t, id); status != "fetched" || title != fmt.Sprintf("up.breaker.test/p%d", i) {
			t.Fatalf("bookmark of the healthy host: %s %q", status, title)
		}
	}
	// The page verdicts all completed, and their host's breaker stayed closed.
	for _, id := range gone {
		if j := b.waitJob(t, id, venturi.StateCompleted); j.RunCount != 1 || j.Journal[0].Note != "fetch failed: http_status 404" {
			t.Fatalf("fetch of a gone page: %d runs, journal %+v", j.RunCount, j.Journal)
		}
	}
	if c := b.circuit(t, "gone.breaker.test"); c == nil || c.State != venturi.CircuitClosed || c.Failures != 0 {
		t.Fatalf("the breaker of a host whose pages are gone: %+v, want closed without failures", c)
	}
	if c := b.circuit(t, "up.breaker.test"); c == nil || c.State != venturi.CircuitClosed {
		t.Fatalf("the healthy host's breaker: %+v", c)
	}
	// Meanwhile the failing host got no request, and its waiting fetches did not run.
	if c := b.circuit(t, "down.breaker.test"); c.State != venturi.CircuitOpen {
		t.Fatalf("the failing host's breaker closed meanwhile: %+v", *c)
	}
	if _, _, hits := srv.counts("down.breaker.test"); hits != downHits {
		t.Fatalf("the failing host got %d requests while its breaker was open", hits-downHits)
	}
	for id, runs := range waiting {
		j := b.job(t, id)
		if j.RunCount != runs || j.State == venturi.StateDead || j.Circuit == nil || j.Circuit.State != venturi.CircuitOpen {
			t.Fatalf("waiting fetch %s: %s after %d runs (was %d), circuit %+v", id, j.State, j.RunCount, runs, j.Circuit)
		}
	}
}

// TestImportCannotStarveInteractiveFetches: an import's jobs (its pages and the fetches of
// its bookmarks) run in the imports queue. With the imports queue's handlers all stuck on
// the import's fetches and more of them waiting, a bookmark created interactively is
// fetched: the import has made no progress meanwhile, so the interactive fetch did not
// wait for its backlog.
func TestImportCannotStarveInteractiveFetches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	importHosts := []string{"i0.import.test", "i1.import.test", "i2.import.test", "i3.import.test", "i4.import.test", "i5.import.test"}
	srv := newHostServer(t, b, append(slices.Clone(importHosts), "me.interactive.test")...)
	srv.hold(importHosts...)
	var urls []string
	for _, h := range importHosts {
		urls = append(urls, srv.url(h, "bookmarked"))
	}
	task, importJob := b.newImportJob(t, 10, nil, urls...)
	b.startQueues(t, 2, 2)

	if j := b.job(t, importJob); j.Queue != tasks.QueueImports {
		t.Fatalf("import job in queue %q", j.Queue)
	}
	var fetches []ulid.ULID
	eventually(t, "the import's fetches", func() (bool, string) {
		rows, err := b.pool.Query(context.Background(),
			"SELECT fetch_job_id FROM bookmark WHERE import_id = $1 ORDER BY created_at, id", uuidOf(mustParseULID(t, task.ImportID)))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.UUID])
		if err != nil {
			t.Fatal(err)
		}
		fetches = fetches[:0]
		for _, id := range ids {
			fetches = append(fetches, ulid.ULID(id.Bytes))
		}
		return len(fetches) == len(urls), fmt.Sprintf("%d of %d", len(fetches), len(urls))
	})
	inflight := func() (n, hits int) {
		for _, h := range importHosts {
			in, _, hh := srv.counts(h)
			n, hits = n+in, hits+hh
		}
		return
	}
	eventually(t, "both import handlers busy", func() (bool, string) {
		n, hits := inflight()
		return n == 2, fmt.Sprintf("%d import fetches in flight, %d requests", n, hits)
	})
	for _, id := range fetches {
		if j := b.job(t, id); j.Queue != tasks.QueueImports {
			t.Fatalf("the import's fetch %s is in queue %q", id, j.Queue)
		}
	}

	id, job := b.bookmark(t, srv.url("me.interactive.test", "now"))
	j := b.waitJob(t, job, venturi.StateCompleted)
	if status, _, _, _ := b.row(t, id); status != "fetched" || j.Queue != venturi.DefaultQueue {
		t.Fatalf("interactive fetch: bookmark %s, job in queue %q", status, j.Queue)
	}
	// The import made no progress meanwhile: its two fetches are still held and the
	// other four have not reached the server.
	if n, hits := inflight(); n != 2 || hits != 2 {
		t.Fatalf("while the interactive fetch ran, the import had %d fetches in flight and %d requests; want 2 and 2", n, hits)
	}
	for _, id := range fetches {
		if j := b.job(t, id); j.State == venturi.StateCompleted {
			t.Fatalf("an import fetch completed before the interactive one: %s", id)
		}
	}
	srv.releaseAll()
	b.waitJob(t, importJob, venturi.StateCompleted)
	for _, id := range fetches {
		b.waitJob(t, id, venturi.StateCompleted)
	}
}

// TestRefetchLeavesTheImportsQueue: a refetch of an imported bookmark whose import fetch
// still waits becomes a fetch of its own in the default queue (a merge would leave it in
// the imports queue); the import's fetch then completes without fetching, superseded, and
// later refetches replace the interactive one as usual.
func TestRefetchLeavesTheImportsQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	importID := ulid.Make().String()
	id := ulid.Make()
	u := "https://refetched.example/"
	b.fetcher.script[u] = []func() (*fetch.Result, error){ok("Refetched")}
	var importFetch ulid.ULID
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		res, err := b.queue.EnqueueTx(ctx, tx, tasks.FetchBookmark{BookmarkID: id.String(), URL: u, ImportID: importID})
		if err != nil {
			return err
		}
		importFetch = res.ID
		return b.app.Store.InsertImportedBookmark(ctx, tx, store.InsertImportedBookmarkParams{
			ID: uuidOf(id), Url: u, Tags: []string{}, FetchJobID: uuidOf(res.ID)})
	}); err != nil {
		t.Fatal(err)
	}
	// Two refetches, as the API makes them (the bookmark names the newest job).
	refetch := func() venturi.Result {
		var res venturi.Result
		if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			if res, err = b.queue.EnqueueTx(ctx, tx, tasks.FetchBookmark{BookmarkID: id.String(), URL: u}); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "UPDATE bookmark SET fetch_job_id = $1 WHERE id = $2", uuidOf(res.ID), uuidOf(id))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return res
	}
	first, second := refetch(), refetch()
	if first.Action != venturi.ActionIndependent || first.ID == importFetch || second.Action != venturi.ActionReplaced || second.ID != first.ID {
		t.Fatalf("refetches %+v and %+v, want a job of its own, then a replace of it", first, second)
	}
	if q := b.job(t, first.ID).Queue; q != venturi.DefaultQueue {
		t.Fatalf("the refetch is in queue %q", q)
	}
	b.start(t)
	if j := b.waitJob(t, importFetch, venturi.StateCompleted); j.Journal[0].Note != "superseded by a newer fetch job" || j.Queue != tasks.QueueImports {
		t.Fatalf("the import's fetch: queue %q, journal %+v", j.Queue, j.Journal)
	}
	b.waitJob(t, first.ID, venturi.StateCompleted)
	b.fetcher.mu.Lock()
	calls := b.fetcher.calls[u]
	b.fetcher.mu.Unlock()
	if status, title, _, attempts := b.row(t, id); status != "fetched" || title != "Refetched" || attempts != 1 || calls != 1 {
		t.Fatalf("bookmark %s %q after %d attempts and %d fetches, want fetched once", status, title, attempts, calls)
	}
}

func mustParseULID(t *testing.T, s string) ulid.ULID {
	t.Helper()
	id, err := ulid.ParseStrict(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
