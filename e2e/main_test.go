package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/venturi-dev/bookmarks/e2e/internal/stack"
)

// sys is the running system, shared by the scenarios (which run one at a time: some of
// them kill and restart processes).
var sys struct {
	db      *stack.Database
	api     *stack.Process
	worker  *stack.Process
	apiURL  string
	key     string // the API key every call sends (see newKey for others)
	pages   *pageServer
	pageURL string
	logDir  string
	// apiMetrics and workerMetrics are the processes' /metrics URLs (their own listeners).
	apiMetrics, workerMetrics string
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bookmarks-e2e-")
	if err != nil {
		return 0, err
	}
	sys.logDir = dir
	db, err := stack.OpenDatabase(ctx)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	sys.db = db
	fmt.Printf("e2e: PostgreSQL from %s; logs in %s\n", db.Source, dir)

	apiBin, workerBin := filepath.Join(dir, "bookmarks-api"), filepath.Join(dir, "bookmarks-worker")
	if err := stack.Build(ctx, "../bookmarks-api", apiBin); err != nil {
		return 0, err
	}
	if err := stack.Build(ctx, "../bookmarks-worker", workerBin); err != nil {
		return 0, err
	}

	sys.pages = newPageServer()
	srv := httptest.NewServer(sys.pages)
	defer srv.Close()
	defer sys.pages.releaseAll()
	sys.pageURL = srv.URL
	pu, _ := url.Parse(srv.URL)

	port, err := stack.FreePort()
	if err != nil {
		return 0, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	sys.apiURL = "http://" + addr
	var metricsPorts [2]int
	for i := range metricsPorts {
		if metricsPorts[i], err = stack.FreePort(); err != nil {
			return 0, err
		}
	}
	apiMetrics, workerMetrics := "127.0.0.1:"+strconv.Itoa(metricsPorts[0]), "127.0.0.1:"+strconv.Itoa(metricsPorts[1])
	sys.apiMetrics, sys.workerMetrics = "http://"+apiMetrics+"/metrics", "http://"+workerMetrics+"/metrics"
	sys.api = &stack.Process{Name: "api", Bin: apiBin, Log: filepath.Join(dir, "api.log"), Env: []string{
		"DATABASE_URL=" + db.URL, "BOOKMARKS_API_ADDR=" + addr, "BOOKMARKS_METRICS_ADDR=" + apiMetrics,
		"BOOKMARKS_TAG_INDEX_DELAY=3s", "BOOKMARKS_REFETCH_DELAY=3s",
		// Imports of more than confirmAbove items wait for a confirmation, for
		// confirmTimeout (short, for TestUnconfirmedImportIsCancelled); the links it
		// returns are absolute.
		"BOOKMARKS_IMPORT_CONFIRM_ABOVE=" + strconv.Itoa(confirmAbove), "BOOKMARKS_IMPORT_CONFIRM_TIMEOUT=" + confirmTimeout.String(),
		"BOOKMARKS_API_PUBLIC_URL=" + sys.apiURL,
		// The suite's key makes more than the default burst of 3 imports.
		"BOOKMARKS_IMPORT_BURST=10",
	}}
	sys.worker = &stack.Process{Name: "worker", Bin: workerBin, Log: filepath.Join(dir, "worker.log"), Env: []string{
		"DATABASE_URL=" + db.URL, "BOOKMARKS_WORKER_METRICS_ADDR=" + workerMetrics,
		"BOOKMARKS_WORKER_LEASE=2s", "BOOKMARKS_WORKER_POLL=100ms", "BOOKMARKS_WORKER_BACKOFF_BASE=50ms",
		"BOOKMARKS_WORKER_GRACE=5s", "BOOKMARKS_FETCH_TIMEOUT=20s",
		// Two handlers for imports: TestImportCannotStarveInteractiveFetches fills them.
		"BOOKMARKS_WORKER_IMPORT_CONCURRENCY=2",
		// Test-only: the page server is the one loopback address the fetcher may reach, two
		// names resolve (without DNS) to refused addresses, and the hosts of the flow
		// scenarios (flow_test.go) resolve to the page server.
		"BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT=" + pu.Port(),
		"BOOKMARKS_FETCH_STATIC_HOSTS=metadata.e2e.test=169.254.169.254,internal.e2e.test=10.0.0.1," + pageHostsSetting(),
	}}
	// The API authenticates every request but the probes: the suite's key comes from the
	// CLI a user would run.
	if sys.key, err = newKey(ctx, "e2e"); err != nil {
		return 0, err
	}
	if err := sys.api.Start(); err != nil {
		return 0, err
	}
	defer sys.api.Stop()
	if err := sys.worker.Start(); err != nil {
		return 0, err
	}
	defer sys.worker.Stop()
	if err := waitReady(ctx); err != nil {
		return 0, err
	}
	code := m.Run()
	if code != 0 {
		for _, f := range []string{"api.log", "worker.log"} {
			b, _ := os.ReadFile(filepath.Join(dir, f))
			fmt.Fprintf(os.Stderr, "==== %s (last 8 KiB)\n%s\n", f, tail(b, 8<<10))
		}
	} else {
		os.RemoveAll(dir)
	}
	return code, nil
}

// newKey creates an API key with `bookmarks-api keys create --name name`.
func newKey(ctx context.Context, name string) (string, error) {
	out, err := sys.api.Command(ctx, "keys", "create", "--name", name)
	if err != nil {
		return "", err
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, "bmk_") || strings.ContainsAny(key, " \n") {
		return "", fmt.Errorf("keys create printed %q, want the key alone", out)
	}
	return key, nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// pageHosts are the names the worker resolves to the page server (besides 127.0.0.1), so
// that scenarios can fetch from several hosts: politeness and breakers are per host. The
// server's counts per host last the whole suite: each scenario has hosts of its own.
var pageHosts = []string{"a.e2e.test", "b.e2e.test", "down.e2e.test", "me.e2e.test",
	"i0.e2e.test", "i1.e2e.test", "i2.e2e.test", "i3.e2e.test", "i4.e2e.test",
	"load1.e2e.test", "load2.e2e.test", "load3.e2e.test",
	"cancel.e2e.test", "confirm.e2e.test", "link.e2e.test", "wait.e2e.test", "wf1.e2e.test", "wf2.e2e.test",
	"bulk1.e2e.test", "bulk2.e2e.test", "bulk3.e2e.test"}

// downHost is a page host whose every answer is 503 Service Unavailable.
const downHost = "down.e2e.test"

// pageHostsSetting maps every page host to 127.0.0.1 for BOOKMARKS_FETCH_STATIC_HOSTS.
func pageHostsSetting() string {
	var s []string
	for _, h := range pageHosts {
		s = append(s, h+"=127.0.0.1")
	}
	return strings.Join(s, ",")
}

// pageServer serves the test pages:
//
//	/page/{name}          an HTML page titled "Page {name}"
//	/gone                 410 Gone
//	/flaky/{key}          503 twice per key, then a page
//	/redirect?to=URL      302 to URL
//	/slow/{key}           blocks the first request per key until release(key), then serves a page
//	/held/{group}/{name}  blocks every request until release("held/"+group), then serves a page
//	any path of downHost  503
//
// It counts the requests in flight per host (the Host header without the port) and the
// most at once.
type pageServer struct {
	mu       sync.Mutex
	hits     map[string]int
	release  map[string]chan struct{}
	arrived  map[string]chan struct{}
	inflight map[string]int
	peak     map[string]int
	hostHits map[string]int
}

func newPageServer() *pageServer {
	return &pageServer{hits: map[string]int{}, release: map[string]chan struct{}{}, arrived: map[string]chan struct{}{},
		inflight: map[string]int{}, peak: map[string]int{}, hostHits: map[string]int{}}
}

// hostCounts returns host's requests in flight, the most at once, and all of them.
func (p *pageServer) hostCounts(host string) (inflight, peak, hits int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight[host], p.peak[host], p.hostHits[host]
}

// pageURL is a page of the server under one of the pageHosts.
func pageURL(host, path string) string {
	u, _ := url.Parse(sys.pageURL)
	return "http://" + host + ":" + u.Port() + path
}

func (p *pageServer) chans(key string) (arrived, release chan struct{}) {
	if p.release[key] == nil {
		p.release[key] = make(chan struct{})
		p.arrived[key] = make(chan struct{})
	}
	return p.arrived[key], p.release[key]
}

// waitArrived returns a channel closed when the first request for /slow/key arrives.
func (p *pageServer) waitArrived(key string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, _ := p.chans(key)
	return a
}

func (p *pageServer) releaseKey(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, r := p.chans(key)
	select {
	case <-r:
	default:
		close(r)
	}
}

func (p *pageServer) releaseAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.release {
		select {
		case <-r:
		default:
			close(r)
		}
	}
}

func (p *pageServer) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[path]
}

func (p *pageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	p.mu.Lock()
	p.hits[r.URL.Path]++
	n := p.hits[r.URL.Path]
	p.hostHits[host]++
	p.inflight[host]++
	p.peak[host] = max(p.peak[host], p.inflight[host])
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inflight[host]--
		p.mu.Unlock()
	}()
	page := func(name string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<html><head><title>Page %s</title></head><body><h1>%s</h1><p>Content of %s.</p></body></html>", name, name, name)
	}
	switch {
	case host == downHost:
		w.WriteHeader(http.StatusServiceUnavailable)
	case strings.HasPrefix(r.URL.Path, "/held/"):
		group, name, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/held/"), "/")
		p.mu.Lock()
		_, rel := p.chans("held/" + group)
		p.mu.Unlock()
		select {
		case <-rel:
		case <-r.Context().Done():
			return
		}
		page("held " + name)
	case strings.HasPrefix(r.URL.Path, "/page/"):
		page(strings.TrimPrefix(r.URL.Path, "/page/"))
	case r.URL.Path == "/gone":
		w.WriteHeader(http.StatusGone)
	case strings.HasPrefix(r.URL.Path, "/flaky/"):
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		page("flaky")
	case r.URL.Path == "/redirect":
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	case strings.HasPrefix(r.URL.Path, "/slow/"):
		key := strings.TrimPrefix(r.URL.Path, "/slow/")
		p.mu.Lock()
		a, rel := p.chans(key)
		select {
		case <-a:
		default:
			close(a)
		}
		p.mu.Unlock()
		select {
		case <-rel:
		case <-r.Context().Done():
			return
		}
		page("slow " + key)
	default:
		http.NotFound(w, r)
	}
}
