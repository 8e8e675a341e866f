package dashboard_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/dashboard"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// bundle is a dashboard on a fresh migrated schema, served on httptest, with a client
// that keeps cookies.
type bundle struct {
	pool   *pgxpool.Pool
	q      *venturi.Queue
	srv    *httptest.Server
	client *http.Client
}

func setup(t *testing.T, access func(*http.Request) dashboard.Access) *bundle {
	t.Helper()
	return serve(t, migrated(t), access)
}

// migrated is a pool on a fresh migrated schema.
func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 5)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

func serve(t *testing.T, pool *pgxpool.Pool, access func(*http.Request) dashboard.Access) *bundle {
	t.Helper()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	h, err := dashboard.New(q, dashboard.Config{Prefix: "/ops", Access: access, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return &bundle{pool: pool, q: q, srv: srv, client: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func grant(actor string, a dashboard.Action) func(*http.Request) dashboard.Access {
	return func(*http.Request) dashboard.Access { return dashboard.Access{Actor: actor, Grants: a} }
}

func (b *bundle) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := b.client.Get(b.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// post sends a form; hdr adds headers (Sec-Fetch-Site, ...).
func (b *bundle) post(t *testing.T, path string, form url.Values, hdr ...string) (int, string, string) {
	t.Helper()
	return b.request(t, http.MethodPost, path, form, hdr...)
}

// request sends a request, with form as its body unless nil and headers (name, value, ...),
// and returns its status, Location and body.
func (b *bundle) request(t *testing.T, method, path string, form url.Values, hdr ...string) (int, string, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(out)
}

var tokenRE = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// token loads a page that needs no stats (the cron page) and returns its form token.
func (b *bundle) token(t *testing.T) string {
	t.Helper()
	status, body := b.get(t, "/ops/cron")
	m := tokenRE.FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		t.Fatalf("GET /ops/cron: %d, no token in %q", status, body)
	}
	return m[1]
}

func (b *bundle) paused(t *testing.T, queue string) bool {
	t.Helper()
	l, err := b.q.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, qs := range l {
		if qs.Name == queue {
			return qs.Paused
		}
	}
	return false
}

// TestReadOnlyByDefault: without Config.Access nothing is granted: the pages have no form
// and no token, and a POST is refused.
func TestReadOnlyByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.q.Schedule(context.Background(), venturi.Schedule{Name: "nightly", Cron: "@daily", Task: nop{}}); err != nil {
		t.Fatal(err)
	}
	status, body := b.get(t, "/ops/cron")
	if status != http.StatusOK || !strings.Contains(body, "nightly") {
		t.Fatalf("GET /ops/cron = %d %q", status, body)
	}
	if strings.Contains(body, "<form method=\"post\"") || strings.Contains(body, "csrf-token") {
		t.Fatal("a read-only page shows an action's form")
	}
	if !strings.Contains(body, "unknown · read-only") {
		t.Fatal("the page does not say it is read-only")
	}
	status, _, _ = b.post(t, "/ops/queues/pause", url.Values{"queue": {"default"}})
	if status != http.StatusForbidden || b.paused(t, "default") {
		t.Fatalf("a read-only POST: %d; want 403 and the queue running", status)
	}
}

// TestDeniedActionRefused: an action that is not granted is refused with 403 even with a
// valid token, and a granted one goes through and is audited under the actor.
func TestDeniedActionRefused(t *testing.T) {
	t.Parallel()
	pool := migrated(t)
	ro := serve(t, pool, grant("carol", dashboard.Retry))
	status, _, body := ro.post(t, "/ops/queues/pause", url.Values{"queue": {"default"}, "csrf": {ro.token(t)}})
	if status != http.StatusForbidden || !strings.Contains(body, "not allowed") || ro.paused(t, "default") {
		t.Fatalf("POST of a denied action: %d %q; want 403 and the queue running", status, body)
	}
	rw := serve(t, pool, grant("dave", dashboard.PauseQueues))
	status, loc, _ := rw.post(t, "/ops/queues/pause", url.Values{"queue": {"default"}, "csrf": {rw.token(t)}})
	if status != http.StatusSeeOther || loc != "/ops/queues?done=paused" || !rw.paused(t, "default") {
		t.Fatalf("POST of a granted action: %d %q; want 303 to the queues and the queue paused", status, loc)
	}
}

// TestCSRF: a POST needs the token of its cookie and actor, and must not come from another
// site.
func TestCSRF(t *testing.T) {
	t.Parallel()
	pool := migrated(t)
	b := serve(t, pool, grant("erin", dashboard.PauseQueues))
	tok := b.token(t)
	other := serve(t, pool, grant("mallory", dashboard.PauseQueues))
	otherTok := other.token(t)
	form := func(tok string) url.Values { return url.Values{"queue": {"q1"}, "csrf": {tok}} }
	for _, tt := range []struct {
		name string
		form url.Values
		hdr  []string
	}{
		{"no token", url.Values{"queue": {"q1"}}, nil},
		{"wrong token", form("AAAA"), nil},
		{"another browser's token", form(otherTok), nil},
		{"from another site", form(tok), []string{"Sec-Fetch-Site", "cross-site"}},
		{"from another origin", form(tok), []string{"Origin", "https://evil.example"}},
	} {
		status, _, body := b.post(t, "/ops/queues/pause", tt.form, tt.hdr...)
		if status != http.StatusForbidden || b.paused(t, "q1") {
			t.Errorf("%s: %d %q; want 403 and the queue running", tt.name, status, body)
		}
	}
	// A GET never changes anything.
	if status, _ := b.get(t, "/ops/queues/pause?queue=q1"); status == http.StatusOK || b.paused(t, "q1") {
		t.Errorf("GET of an action: %d", status)
	}
	status, _, _ := b.post(t, "/ops/queues/pause", form(tok), "Sec-Fetch-Site", "same-origin")
	if status != http.StatusSeeOther || !b.paused(t, "q1") {
		t.Fatalf("a same-origin POST with its token: %d; want 303 and the queue paused", status)
	}
}

// TestHeadersAndLimits: every page has the security headers; inputs are bounded; the
// prefix alone redirects.
func TestHeadersAndLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, grant("fay", dashboard.AllActions))
	resp, err := b.client.Get(b.srv.URL + "/ops/cron")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("headers: %v", resp.Header)
	}
	var nonce *http.Cookie
	for _, c := range resp.Cookies() {
		nonce = c
	}
	if nonce == nil || !nonce.HttpOnly || nonce.SameSite != http.SameSiteStrictMode || nonce.Path != "/ops/" {
		t.Fatalf("the nonce cookie: %+v", nonce)
	}
	for _, path := range []string{"/ops/jobs?q=" + strings.Repeat("x", dashboard.MaxFilterBytes+1), "/ops/jobs?limit=1000",
		"/ops/jobs?state=bogus", "/ops/audit?before=x"} {
		if status, _ := b.get(t, path); status != http.StatusBadRequest {
			t.Errorf("GET %.60s: %d, want 400", path, status)
		}
	}
	big := url.Values{"queue": {"q"}, "csrf": {b.token(t)}, "pad": {strings.Repeat("x", dashboard.MaxFormBytes)}}
	if status, _, _ := b.post(t, "/ops/queues/pause", big); status != http.StatusBadRequest {
		t.Errorf("an oversized form: %d, want 400", status)
	}
	tok := b.token(t)
	if status, _, _ := b.post(t, "/ops/queues/concurrency", url.Values{"queue": {"q"}, "concurrency": {"-1"}, "csrf": {tok}}); status != http.StatusBadRequest {
		t.Errorf("a negative limit: %d, want 400", status)
	}
	if status, _ := b.get(t, "/ops/jobs/not-a-ulid"); status != http.StatusNotFound {
		t.Errorf("a malformed job ID: %d, want 404", status)
	}
	resp, err = b.client.Get(b.srv.URL + "/ops")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The handler redirects the prefix alone (301); a ServeMux with "/ops/" does it first (307).
	if (resp.StatusCode != http.StatusMovedPermanently && resp.StatusCode != http.StatusTemporaryRedirect) || resp.Header.Get("Location") != "/ops/" {
		t.Fatalf("GET /ops: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, name := range []string{"app.css", "app.js"} {
		if status, body := b.get(t, "/ops/assets/"+name); status != http.StatusOK || len(body) < 100 {
			t.Errorf("asset %s: %d", name, status)
		}
	}
	for _, path := range []string{"/ops/assets/../dashboard.go", "/ops/assets/%2e%2e%2fdashboard.go", "/ops/assets/dashboard.go"} {
		if status, body := b.get(t, path); status == http.StatusOK || strings.Contains(body, "package dashboard") {
			t.Errorf("GET %s: %d, a file outside static/", path, status)
		}
	}
}

// TestInternalErrorsAreNotShown: a database error is logged, and the page says only that
// something went wrong, with a reference.
func TestInternalErrorsAreNotShown(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, testdb.Schema(t), 5) // never migrated: every query fails
	b := serve(t, pool, nil)
	for _, path := range []string{"/ops/", "/ops/cron", "/ops/jobs", "/ops/breakers", "/ops/workflows", "/ops/workflows/" + ulid.Make().String()} {
		status, body := b.get(t, path)
		if status != http.StatusInternalServerError || !strings.Contains(body, "reference") {
			t.Errorf("GET %s: %d, want 500 with a reference", path, status)
		}
		for _, leak := range []string{"relation", "venturi_", "SQLSTATE", "does not exist"} {
			if strings.Contains(body, leak) {
				t.Errorf("GET %s shows %q", path, leak)
			}
		}
	}
	status, body := b.get(t, "/ops/api/stats")
	if status != http.StatusInternalServerError || strings.Contains(body, "relation") {
		t.Errorf("GET /ops/api/stats: %d %q", status, body)
	}
}

type nop struct{}

func (nop) Kind() string { return "nop" }

// boom fails permanently: its jobs die on their first run.
type boom struct {
	N int `json:"n"`
}

func (boom) Kind() string { return "boom" }

// TestPagesOnRealJobs: with jobs that a worker ran to dead and a stats sample, every page
// renders what it reads; a bad filter or cursor is a 400 that says why; a job is retried,
// a bulk delete runs after its dry run, and the audit page lists both.
func TestPagesOnRealJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := migrated(t)
	b := serve(t, pool, grant("gus", dashboard.AllActions))
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{StatsInterval: 100 * time.Millisecond,
		MaintenanceInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := venturi.RegisterFunc(w, func(_ context.Context, j boom, _ *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
		return venturi.Outcome{}, venturi.Permanentf("boom %d <b>", j.N)
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	var ids []string
	for i := range 3 {
		res, err := b.q.Enqueue(ctx, boom{N: i})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID.String())
	}
	waitUntil(t, "the jobs to die and a sample to count them", func() bool {
		st, err := b.q.Stats(ctx)
		if err != nil || len(st.Queues) == 0 {
			return false
		}
		return st.Queues[0].Counts[venturi.StateDead] == 3
	})
	for _, tt := range []struct{ path, want string }{
		{"/ops/", "boom 2 &lt;b&gt;"},
		{"/ops/jobs", ids[0]},
		{"/ops/jobs?state=dead&limit=2", "Next page"},
		{"/ops/dead?q=kind:boom", ids[1]},
		{"/ops/jobs/" + ids[0], "boom 0 &lt;b&gt;"},
		{"/ops/queues", "default"},
		{"/ops/bulk/retry?q=state:dead", `<dd id="eligible">3</dd>`},
		{"/ops/api/stats", `"t:dead":"3"`},
		{"/ops/", `Deferred merges waiting: <strong data-live="d:total">0</strong>`},
	} {
		status, body := b.get(t, tt.path)
		if status != http.StatusOK || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s: %d, want 200 with %q in %.2000s", tt.path, status, tt.want, body)
		}
	}
	// Enqueues from SQL of a kind whose merge no running worker knows (boom's worker does
	// not register it), on one key: the first inserts, the next two wait for a Go merge.
	for range 3 {
		if _, err := pool.Exec(ctx, `SELECT venturi_enqueue('ledger.sync', '{}', queue => 'parked', dedup_key => 'acct-1')`); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct{ path, want string }{
		{"/ops/", `Deferred merges waiting: <strong data-live="d:total">2</strong>`},
		{"/ops/", `<td class="num" data-live="d:waiting:ledger.sync">2</td>`},
		{"/ops/api/stats", `"d:waiting:ledger.sync":"2"`},
	} {
		status, body := b.get(t, tt.path)
		if status != http.StatusOK || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s: %d, want 200 with %q in %.4000s", tt.path, status, tt.want, body)
		}
	}
	for _, tt := range []struct{ path, want string }{
		{"/ops/jobs?q=colour:blue", "colour"},
		{"/ops/jobs?cursor=garbage", "cursor is not valid"},
		{"/ops/bulk/retry?q=state:nope", "not valid"},
	} {
		status, body := b.get(t, tt.path)
		if status != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s: %d, want 400 saying %q", tt.path, status, tt.want)
		}
	}
	tok := b.token(t)
	status, loc, _ := b.post(t, "/ops/queues/concurrency", url.Values{"csrf": {tok}, "queue": {"default"}, "concurrency": {"3"}})
	if status != http.StatusSeeOther || loc != "/ops/queues?done=limited" {
		t.Fatalf("set a limit: %d %q", status, loc)
	}
	if l, err := b.q.Queues(ctx); err != nil || len(l) == 0 || l[0].Concurrency != 3 {
		t.Fatalf("the queue's limit: %+v %v", l, err)
	}
	status, loc, _ = b.post(t, "/ops/jobs/"+ids[0]+"/delete", url.Values{"csrf": {tok}})
	if status != http.StatusSeeOther || loc != "/ops/jobs?done=deleted&n=1" {
		t.Fatalf("delete one job: %d %q", status, loc)
	}
	if _, err := b.q.Job(ctx, mustULID(t, ids[0])); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("the deleted job: %v", err)
	}
	status, loc, _ = b.post(t, "/ops/bulk/delete", url.Values{"csrf": {tok}, "q": {"kind:boom state:dead"}, "reason": {"cleanup"}})
	if status != http.StatusSeeOther || !strings.Contains(loc, "done=deleted&n=2") {
		t.Fatalf("bulk delete: %d %q", status, loc)
	}
	_, body := b.get(t, "/ops/audit")
	for _, want := range []string{"jobs.delete", "queue.concurrency", "gus", "cleanup", "kind:boom"} {
		if !strings.Contains(body, want) {
			t.Errorf("the audit page lacks %q", want)
		}
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func mustULID(t *testing.T, s string) ulid.ULID {
	t.Helper()
	id, err := ulid.ParseStrict(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestPrefixes: a bad prefix or refresh is an error; the root prefix serves at /.
func TestPrefixes(t *testing.T) {
	t.Parallel()
	q := venturi.NewQueue(migrated(t), venturi.QueueConfig{})
	for _, cfg := range []dashboard.Config{{Prefix: "ops"}, {Prefix: "/ops/"}, {Prefix: "/o ps"}, {Prefix: "/{x}"},
		{Refresh: time.Millisecond}, {CSRFKey: []byte("short")}, {TrustedOrigins: []string{"not a url"}}} {
		if _, err := dashboard.New(q, cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
	if _, err := dashboard.New(nil, dashboard.Config{}); err == nil {
		t.Error("New(nil): no error")
	}
	h, err := dashboard.New(q, dashboard.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `href="/jobs"`) || !strings.Contains(string(body), `src="/assets/app.js"`) {
		t.Fatalf("GET / at the root: %d %.500s", resp.StatusCode, body)
	}
	resp, err = http.Get(srv.URL + "/nowhere")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /nowhere: %d", resp.StatusCode)
	}
}
