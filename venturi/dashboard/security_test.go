package dashboard_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/dashboard"
)

// errorLog records the ERROR lines of a dashboard's logger.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.msgs = append(l.msgs, r.Message)
	}
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

func (l *errorLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// serveConfig is serve with a whole Config, over TLS when tls is set.
func serveConfig(t *testing.T, q *venturi.Queue, cfg dashboard.Config, tls bool) *bundle {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = "/ops"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := dashboard.New(q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", h)
	mux.Handle("/ops", h)
	var srv *httptest.Server
	client := &http.Client{}
	if tls {
		srv = httptest.NewTLSServer(mux)
		client = srv.Client()
	} else {
		srv = httptest.NewServer(mux)
	}
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	client.Jar = jar
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &bundle{q: q, srv: srv, client: client}
}

// do sends a request with headers (name, value, ...) and returns its status and body.
func (b *bundle) do(t *testing.T, method, path string, form url.Values, hdr ...string) (int, string) {
	t.Helper()
	status, _, body := b.request(t, method, path, form, hdr...)
	return status, body
}

// TestTextPostgreSQLRefusesIsABadRequest: a NUL character (or invalid UTF-8) in a filter,
// in a crafted cursor of the job list or of the breakers, or in a form's name of a queue,
// schedule or breaker is a 400 that says what is wrong, and logs no error.
func TestTextPostgreSQLRefusesIsABadRequest(t *testing.T) {
	t.Parallel()
	logs := &errorLog{}
	b := serveConfig(t, venturi.NewQueue(migrated(t), venturi.QueueConfig{}),
		dashboard.Config{Access: grant("ivy", dashboard.AllActions), Logger: slog.New(logs)}, false)
	enc := func(s string) string { return url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(s))) }
	id := ulid.Make().String()
	for _, tt := range []struct{ path, says string }{
		{"/ops/jobs?q=kind:a%00b", "NUL"},
		{"/ops/jobs?q=" + url.QueryEscape(`kind:"\u0000"`), "NUL"},
		{"/ops/jobs?q=" + url.QueryEscape(`note:"\xff"`), "UTF-8"},
		{"/ops/dead?q=queue:q%00", "NUL"},
		{"/ops/jobs?q=payload.a%00:1", "NUL"},
		{"/ops/jobs?q=kind:%ff", "not valid text"},
		{"/ops/bulk/retry?q=kind:a%00", "NUL"},
		{"/ops/jobs?state=available&cursor=" + enc(`{"o":"available","s":"available","i":"`+id+`","q":"d\u0000"}`), "cursor is not valid"},
		{"/ops/jobs?state=available&cursor=" + enc(`{"o":"available","s":"available","i":"`+id+`","q":"d","p":"\u0000"}`), "cursor is not valid"},
		{"/ops/breakers?cursor=" + enc("b\x1fk\x00"), "cursor is not valid"},
		{"/ops/breakers?cursor=" + enc("b\x1f\xff"), "cursor is not valid"},
		{"/ops/breakers?limit=0", "page size"},
	} {
		status, body := b.do(t, http.MethodGet, tt.path, nil)
		if status != http.StatusBadRequest || !strings.Contains(html.UnescapeString(body), tt.says) {
			t.Errorf("GET %s: %d; want 400 saying %q in %.300s", tt.path, status, tt.says, body)
		}
	}
	tok := b.token(t)
	for _, tt := range []struct {
		path string
		form url.Values
	}{
		{"/ops/breakers/reset", url.Values{"kind": {"a\x00"}}},
		{"/ops/breakers/reset", url.Values{"kind": {"a"}, "partition": {"p\x00"}}},
		{"/ops/breakers/reset", url.Values{"kind": {"\xff"}}},
		{"/ops/cron/pause", url.Values{"schedule": {"n\x00"}}},
		{"/ops/queues/pause", url.Values{"queue": {"q\x00"}}},
	} {
		tt.form.Set("csrf", tok)
		if status, body := b.do(t, http.MethodPost, tt.path, tt.form); status != http.StatusBadRequest {
			t.Errorf("POST %s %q: %d; want 400 (%.200s)", tt.path, tt.form, status, body)
		}
	}
	if l := logs.lines(); len(l) != 0 {
		t.Fatalf("bad input logged errors: %q", l)
	}
}

// TestCostlyGETsRefuseOtherSites: a bulk action's dry run and a listing that reads a
// search window are refused (403, with a link that runs them from the dashboard) when a
// browser sends them from another site or origin; the user's own navigation, same-origin
// requests, requests from no browser and trusted origins pass; cheap listings pass from
// anywhere.
func TestCostlyGETsRefuseOtherSites(t *testing.T) {
	t.Parallel()
	b := serveConfig(t, venturi.NewQueue(migrated(t), venturi.QueueConfig{}),
		dashboard.Config{Access: grant("jo", dashboard.AllActions), TrustedOrigins: []string{"https://admin.example"}}, false)
	costly := []string{"/ops/bulk/retry?q=state:dead", "/ops/bulk/delete", "/ops/jobs?q=note:timeout", "/ops/dead?q=payload.user.id:42",
		"/ops/jobs?q=attachment.status:503", "/ops/jobs?q=key:user/42", "/ops/jobs?q=note:x&state=dead&cursor=x"}
	cheap := []string{"/ops/jobs?q=kind:fetch", "/ops/jobs?q=kind:fetch+key:user/42", "/ops/dead", "/ops/", "/ops/breakers", "/ops/api/stats"}
	foreign := [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"},
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
	}
	own := [][]string{
		nil, // not a browser, or a browser's GET without an Origin
		{"Sec-Fetch-Site", "same-origin"},
		{"Sec-Fetch-Site", "none"},
		{"Origin", b.srv.URL},
		{"Sec-Fetch-Site", "cross-site", "Origin", "https://admin.example"},
	}
	for _, path := range costly {
		for _, hdr := range foreign {
			status, body := b.do(t, http.MethodGet, path, nil, hdr...)
			if status != http.StatusForbidden || !strings.Contains(body, "came from another site") || !strings.Contains(body, `id="run-here"`) {
				t.Errorf("GET %s with %q: %d; want 403 from another site, with a link to run it (%.300s)", path, hdr, status, body)
			}
		}
		for _, hdr := range own {
			if status, body := b.do(t, http.MethodGet, path, nil, hdr...); status == http.StatusForbidden {
				t.Errorf("GET %s with %q: 403 (%.300s)", path, hdr, body)
			}
		}
	}
	for _, path := range cheap {
		for _, hdr := range foreign {
			if status, _ := b.do(t, http.MethodGet, path, nil, hdr...); status != http.StatusOK {
				t.Errorf("GET %s with %q: %d; want 200 (no search, no count)", path, hdr, status)
			}
		}
	}
	// The refusal's link runs the same request, followed from the dashboard's page.
	_, body := b.do(t, http.MethodGet, "/ops/jobs?q=note:timeout", nil, "Sec-Fetch-Site", "cross-site")
	m := regexp.MustCompile(`href="([^"]+)" id="run-here"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no link in %.500s", body)
	}
	if status, body := b.do(t, http.MethodGet, html.UnescapeString(m[1]), nil, "Sec-Fetch-Site", "same-origin"); status != http.StatusOK || !strings.Contains(body, "note:timeout") {
		t.Fatalf("the link %s: %d %.300s", m[1], status, body)
	}
}

// TestOriginCheckComparesTheScheme: without Sec-Fetch-Site, a POST (or a costly GET)
// whose Origin has the dashboard's host but another scheme is refused: http://host on a
// dashboard served over TLS, https://host on one served over plain HTTP (unless a proxy
// says it terminated TLS), and anything but Config.PublicOrigin when that is set.
func TestOriginCheckComparesTheScheme(t *testing.T) {
	t.Parallel()
	q := venturi.NewQueue(migrated(t), venturi.QueueConfig{})
	acc := grant("kim", dashboard.PauseQueues|dashboard.Retry)
	pause := func(b *bundle, hdr ...string) int {
		t.Helper()
		status, _ := b.do(t, http.MethodPost, "/ops/queues/resume", url.Values{"queue": {"q1"}, "csrf": {b.token(t)}}, hdr...)
		return status
	}
	dry := func(b *bundle, hdr ...string) int {
		t.Helper()
		status, _ := b.do(t, http.MethodGet, "/ops/bulk/retry?q=state:dead", nil, hdr...)
		return status
	}
	hostOf := func(b *bundle) string { u, _ := url.Parse(b.srv.URL); return u.Host }
	tlsB := serveConfig(t, q, dashboard.Config{Access: acc}, true)
	plain := serveConfig(t, q, dashboard.Config{Access: acc}, false)
	public := serveConfig(t, q, dashboard.Config{Access: acc, PublicOrigin: "https://ops.example.com"}, false)
	for _, tt := range []struct {
		name   string
		b      *bundle
		hdr    []string
		passes bool
	}{
		{"TLS, Origin http://host", tlsB, []string{"Origin", "http://" + hostOf(tlsB)}, false},
		{"TLS, Origin https://host", tlsB, []string{"Origin", "https://" + hostOf(tlsB)}, true},
		{"plain, Origin https://host", plain, []string{"Origin", "https://" + hostOf(plain)}, false},
		{"plain, Origin http://host", plain, []string{"Origin", "http://" + hostOf(plain)}, true},
		{"plain, Origin HTTP://HOST", plain, []string{"Origin", "HTTP://" + strings.ToUpper(hostOf(plain))}, true},
		{"behind a TLS proxy, Origin http://host", plain, []string{"X-Forwarded-Proto", "https", "Origin", "http://" + hostOf(plain)}, false},
		{"behind a TLS proxy, Origin https://host", plain, []string{"X-Forwarded-Proto", "https", "Origin", "https://" + hostOf(plain)}, true},
		{"PublicOrigin, Origin http://host", public, []string{"Origin", "http://" + hostOf(public)}, false},
		{"PublicOrigin, Origin http://ops.example.com", public, []string{"Origin", "http://ops.example.com"}, false},
		{"PublicOrigin, Origin https://ops.example.com", public, []string{"Origin", "https://ops.example.com"}, true},
	} {
		want := map[bool]int{true: http.StatusSeeOther, false: http.StatusForbidden}[tt.passes]
		if got := pause(tt.b, tt.hdr...); got != want {
			t.Errorf("%s: POST %d; want %d", tt.name, got, want)
		}
		want = map[bool]int{true: http.StatusOK, false: http.StatusForbidden}[tt.passes]
		if got := dry(tt.b, tt.hdr...); got != want {
			t.Errorf("%s: dry run %d; want %d", tt.name, got, want)
		}
	}
	// An https PublicOrigin marks the nonce cookie Secure, served over plain HTTP too.
	resp, err := public.client.Get(public.srv.URL + "/ops/cron?fresh")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	jar, _ := cookiejar.New(nil)
	fresh := &http.Client{Jar: jar}
	resp, err = fresh.Get(public.srv.URL + "/ops/cron")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Cookies(); len(c) != 1 || !c[0].Secure {
		t.Fatalf("cookies with an https PublicOrigin: %+v", c)
	}
	for _, o := range []string{"ops.example.com", "https://ops.example.com/path", "ftp://x", "https://u@x", "https://"} {
		if _, err := dashboard.New(q, dashboard.Config{PublicOrigin: o}); err == nil {
			t.Errorf("PublicOrigin %q: no error", o)
		}
	}
}

// TestTokensBindToTheSubject: two users of one name (one browser, one nonce) cannot use
// each other's form tokens when their Access names a Subject, and the audit log records
// "name (subject)"; an Access with an Actor only works as it did before Subject existed
// (its tokens bind to the Actor, the audit log records the Actor).
func TestTokensBindToTheSubject(t *testing.T) {
	t.Parallel()
	q := venturi.NewQueue(migrated(t), venturi.QueueConfig{})
	// The host's authentication, reduced to a header naming the subject.
	b := serveConfig(t, q, dashboard.Config{Access: func(r *http.Request) dashboard.Access {
		return dashboard.Access{Actor: "admin", Subject: r.Header.Get("X-Subject"), Grants: dashboard.PauseQueues}
	}}, false)
	tokenAs := func(subject string) string {
		t.Helper()
		_, body := b.do(t, http.MethodGet, "/ops/cron", nil, "X-Subject", subject)
		m := tokenRE.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no token for %q", subject)
		}
		return m[1]
	}
	pause := func(queue, subject, tok string) int {
		t.Helper()
		status, _ := b.do(t, http.MethodPost, "/ops/queues/pause", url.Values{"queue": {queue}, "csrf": {tok}}, "X-Subject", subject)
		return status
	}
	keyA, keyB := tokenAs("key-A"), tokenAs("key-B")
	if keyA == keyB {
		t.Fatal("two subjects of one name got one token")
	}
	if got := pause("q1", "key-B", keyA); got != http.StatusForbidden || b.paused(t, "q1") {
		t.Fatalf("key B with key A's token: %d; want 403", got)
	}
	if got := pause("q1", "", keyA); got != http.StatusForbidden {
		t.Fatalf("no subject with key A's token: %d; want 403", got)
	}
	if got := pause("q1", "key-A", keyA); got != http.StatusSeeOther || !b.paused(t, "q1") {
		t.Fatalf("key A with its token: %d; want 303", got)
	}
	// Without a Subject, the Actor is the identity, as before.
	noSub := tokenAs("")
	if got := pause("q2", "", noSub); got != http.StatusSeeOther {
		t.Fatalf("an Actor-only Access with its token: %d; want 303", got)
	}
	only := serveConfig(t, q, dashboard.Config{Access: func(*http.Request) dashboard.Access {
		return dashboard.Access{Subject: "svc-7", Grants: dashboard.PauseQueues}
	}}, false)
	if status, _ := only.do(t, http.MethodPost, "/ops/queues/pause", url.Values{"queue": {"q3"}, "csrf": {only.token(t)}}); status != http.StatusSeeOther {
		t.Fatalf("a Subject-only Access: %d", status)
	}
	entries, err := q.AuditLog(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Actor+" "+e.Action+" "+e.Target)
	}
	want := []string{"svc-7 queue.pause q3", "admin queue.pause q2", "admin (key-A) queue.pause q1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("audit log: %q; want %q", got, want)
	}
}

// TestBreakersPage: with more breakers than a page, the breakers page lists one page at a
// time, each with a link to the next, and every breaker appears once.
func TestBreakersPage(t *testing.T) {
	t.Parallel()
	pool := migrated(t)
	const hosts = 130
	for _, stmt := range []string{
		`INSERT INTO venturi_kind (kind, brk_failures, brk_by_part) VALUES ('fetch', 3, true)`,
		`INSERT INTO venturi_gate (key, kind, part, fails)
		 SELECT 'b' || chr(31) || 'fetch' || chr(31) || p, 'fetch', p, 1
		 FROM (SELECT 'host-' || lpad(i::text, 3, '0') AS p FROM generate_series(1, ` + fmt.Sprint(hosts) + `) i) s`,
	} {
		if _, err := pool.Exec(context.Background(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	b := serve(t, pool, grant("lee", dashboard.ResetCircuits))
	hostRE := regexp.MustCompile(`<td class="mono">(host-\d{3})</td>`)
	nextRE := regexp.MustCompile(`<a href="([^"]+)" id="next-page">`)
	seen := map[string]bool{}
	path, pages := "/ops/breakers", 0
	for path != "" {
		status, body := b.get(t, path)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, status)
		}
		pages++
		rows := hostRE.FindAllStringSubmatch(body, -1)
		if len(rows) > dashboard.DefaultPageSize {
			t.Fatalf("page %d: %d breakers", pages, len(rows))
		}
		for _, r := range rows {
			if seen[r[1]] {
				t.Fatalf("%s twice", r[1])
			}
			seen[r[1]] = true
		}
		path = ""
		if m := nextRE.FindStringSubmatch(body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	if pages != 3 || len(seen) != hosts {
		t.Fatalf("%d pages, %d breakers; want 3 pages of %d", pages, len(seen), hosts)
	}
	if status, body := b.get(t, "/ops/breakers?limit=200"); status != http.StatusOK || len(hostRE.FindAllString(body, -1)) != hosts {
		t.Fatalf("a page of 200: %d", status)
	}
	if status, _ := b.get(t, "/ops/breakers?limit=201"); status != http.StatusBadRequest {
		t.Fatalf("a page over MaxPageSize: %d", status)
	}
}

// TestPrefixAloneServesOnlyGET: the prefix alone redirects a GET to the overview, and
// answers any other method 405, as every other path does.
func TestPrefixAloneServesOnlyGET(t *testing.T) {
	t.Parallel()
	b := serveConfig(t, venturi.NewQueue(migrated(t), venturi.QueueConfig{}), dashboard.Config{}, false)
	if status, _ := b.do(t, http.MethodGet, "/ops", nil); status != http.StatusMovedPermanently {
		t.Fatalf("GET /ops: %d", status)
	}
	for _, m := range []string{http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, http.MethodPost, "BREW"} {
		for _, path := range []string{"/ops", "/ops/", "/ops/jobs", "/ops/nowhere"} {
			if m == http.MethodPost && path != "/ops" {
				continue // a POST of no action is a 404 (or a 403 without a token)
			}
			if status, _ := b.do(t, m, path, nil); status != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d; want 405", m, path, status)
			}
		}
	}
}
