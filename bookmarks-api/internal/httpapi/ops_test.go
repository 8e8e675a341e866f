package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/apikey"
	"github.com/venturi-dev/venturi"
)

// opsKey creates a key with a dashboard role.
func (b *testBundle) opsKey(t testing.TB, name string, ops apikey.Ops) string {
	t.Helper()
	k, err := apikey.NewStore(b.pool).CreateOps(context.Background(), name, false, ops)
	if err != nil {
		t.Fatal(err)
	}
	return k.Key
}

// opsSession is a browser on the dashboard: Basic credentials and its cookies.
type opsSession struct {
	b       *testBundle
	key     string
	cookies []*http.Cookie
}

func (s *opsSession) request(method, path string, form url.Values, hdr ...string) *httptest.ResponseRecorder {
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, path, nil)
	}
	if s.key != "" {
		req.SetBasicAuth("operator", s.key)
	}
	for _, c := range s.cookies {
		req.AddCookie(c)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := s.b.serve(req)
	s.cookies = append(s.cookies, rec.Result().Cookies()...)
	return rec
}

var opsTokenRE = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

// token loads a page and returns its form token ("" when the page has none: read-only).
func (s *opsSession) token(t *testing.T) string {
	t.Helper()
	rec := s.request(http.MethodGet, "/ops/cron", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /ops/cron: %d %s", rec.Code, rec.Body.String())
	}
	if m := opsTokenRE.FindStringSubmatch(rec.Body.String()); m != nil {
		return m[1]
	}
	return ""
}

func queuePaused(t *testing.T, b *testBundle, name string) bool {
	t.Helper()
	l, err := venturi.NewQueue(b.pool, venturi.QueueConfig{}).Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range l {
		if q.Name == name {
			return q.Paused
		}
	}
	return false
}

// TestOpsRequiresAnOpsKey: the dashboard answers 401 with a Basic challenge without
// credentials, with a wrong key, with a revoked key and with a valid key that has no
// dashboard role; a read key sees it.
func TestOpsRequiresAnOpsKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	read := b.opsKey(t, "viewer", apikey.OpsRead)
	for _, tt := range []struct {
		name string
		set  func(*http.Request)
	}{
		{"no credentials", func(*http.Request) {}},
		{"a key without a dashboard role", func(r *http.Request) { r.SetBasicAuth("x", b.key) }},
		{"a wrong key", func(r *http.Request) { r.SetBasicAuth("x", apikey.WrongSecret(read)) }},
		{"not a key", func(r *http.Request) { r.SetBasicAuth("x", "hunter2") }},
		{"an empty password", func(r *http.Request) { r.SetBasicAuth("viewer", "") }},
	} {
		for _, path := range []string{"/ops", "/ops/", "/ops/jobs", "/ops/assets/app.js"} {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			tt.set(req)
			rec := b.serve(req)
			if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("%s, GET %s: %d %q; want 401 with a Basic challenge", tt.name, path, rec.Code, rec.Header().Get("WWW-Authenticate"))
			}
			requireNoLeak(t, rec.Body.String())
		}
		req := httptest.NewRequest(http.MethodPost, "/ops/queues/pause", strings.NewReader("queue=default"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		tt.set(req)
		if rec := b.serve(req); rec.Code != http.StatusUnauthorized {
			t.Errorf("%s, POST: %d; want 401", tt.name, rec.Code)
		}
	}
	s := &opsSession{b: b, key: read}
	if rec := s.request(http.MethodGet, "/ops/cron", nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "viewer · read-only") {
		t.Fatalf("a read key: %d %.300s", rec.Code, rec.Body.String())
	}
	// The API's Bearer keys open the dashboard too (scripts), with the same role rule.
	req := httptest.NewRequest(http.MethodGet, "/ops/cron", nil)
	req.Header.Set("Authorization", "Bearer "+read)
	if rec := b.serve(req); rec.Code != http.StatusOK {
		t.Fatalf("Bearer read key: %d", rec.Code)
	}
	// A revoked key is refused at once.
	if _, err := apikey.NewStore(b.pool).Revoke(context.Background(), read); err != nil {
		t.Fatal(err)
	}
	if rec := s.request(http.MethodGet, "/ops/cron", nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a revoked key: %d", rec.Code)
	}
}

// TestOpsReadKeyCannotAct: a read key gets pages without forms and a 403 for any action,
// token or not.
func TestOpsReadKeyCannotAct(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := &opsSession{b: b, key: b.opsKey(t, "viewer", apikey.OpsRead)}
	if tok := s.token(t); tok != "" {
		t.Fatal("a read key's page carries a form token")
	}
	// A token of a write session does not help either.
	w := &opsSession{b: b, key: b.opsKey(t, "admin", apikey.OpsWrite)}
	tok := w.token(t)
	for _, form := range []url.Values{{"queue": {"default"}}, {"queue": {"default"}, "csrf": {tok}}} {
		rec := s.request(http.MethodPost, "/ops/queues/pause", form)
		if rec.Code != http.StatusForbidden {
			t.Fatalf("a read key's POST: %d; want 403", rec.Code)
		}
	}
	if queuePaused(t, b, "default") {
		t.Fatal("a read key paused the queue")
	}
}

// TestOpsWriteKeyActs: a write key pauses a queue with the form's token; the audit log
// names the key (its name and ID); a POST without the token, or from another site, is refused.
func TestOpsWriteKeyActs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := &opsSession{b: b, key: b.opsKey(t, "admin", apikey.OpsWrite)}
	tok := s.token(t)
	if tok == "" {
		t.Fatal("a write key's page has no form token")
	}
	if rec := s.request(http.MethodPost, "/ops/queues/pause", url.Values{"queue": {"imports"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("a POST without the token: %d; want 403", rec.Code)
	}
	if rec := s.request(http.MethodPost, "/ops/queues/pause", url.Values{"queue": {"imports"}, "csrf": {tok}},
		"Sec-Fetch-Site", "cross-site"); rec.Code != http.StatusForbidden {
		t.Fatalf("a cross-site POST: %d; want 403", rec.Code)
	}
	if queuePaused(t, b, "imports") {
		t.Fatal("a refused POST paused the queue")
	}
	rec := s.request(http.MethodPost, "/ops/queues/pause", url.Values{"queue": {"imports"}, "csrf": {tok}})
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ops/queues?done=paused" {
		t.Fatalf("a write key's POST: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	if !queuePaused(t, b, "imports") {
		t.Fatal("the queue is not paused")
	}
	entries, err := venturi.NewQueue(b.pool, venturi.QueueConfig{}).AuditLog(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 || !regexp.MustCompile(`^admin \([0-9A-Z]{26}\)$`).MatchString(entries[0].Actor) ||
		entries[0].Action != "queue.pause" || entries[0].Target != "imports" {
		t.Fatalf("audit log: %+v; want queue.pause of imports by admin (its key's ID)", entries)
	}
}

// TestOpsAuthenticatesEveryMethod: every method on /ops and /ops/* is authenticated
// first: without credentials it is a 401 with the Basic challenge (an OPTIONS too, which
// Echo would otherwise answer 204 itself); with a dashboard key, a method the dashboard
// does not serve is a 405.
func TestOpsAuthenticatesEveryMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	read := b.opsKey(t, "viewer", apikey.OpsRead)
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodOptions, http.MethodTrace, http.MethodConnect, "PROPFIND", "REPORT", "BREW", "MKCOL"}
	served := map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true}
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/ops/jobs", http.StatusOK}, {http.MethodHead, "/ops/jobs", http.StatusOK},
		{http.MethodPost, "/ops/queues/pause", http.StatusForbidden}, // a read key
	} {
		req := httptest.NewRequest(tt.method, tt.path, nil)
		req.SetBasicAuth("x", read)
		if rec := b.serve(req); rec.Code != tt.want {
			t.Errorf("%s %s with a read key: %d; want %d", tt.method, tt.path, rec.Code, tt.want)
		}
	}
	for _, m := range methods {
		for _, path := range []string{"/ops", "/ops/", "/ops/jobs", "/ops/nowhere", "/ops/assets/app.js", "/ops/queues/pause"} {
			req := httptest.NewRequest(m, path, nil)
			rec := b.serve(req)
			if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("%s %s without credentials: %d %q; want 401 with a Basic challenge", m, path, rec.Code, rec.Header().Get("WWW-Authenticate"))
			}
			requireNoLeak(t, rec.Body.String())
			req = httptest.NewRequest(m, path, nil)
			req.SetBasicAuth("x", read)
			rec = b.serve(req)
			switch {
			case served[m] && rec.Code == http.StatusUnauthorized:
				t.Errorf("%s %s with a read key: 401", m, path)
			case !served[m] && (rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD, POST"):
				t.Errorf("%s %s with a read key: %d, Allow %q; want 405 allowing GET, HEAD, POST", m, path, rec.Code, rec.Header().Get("Allow"))
			}
		}
	}
}

// TestOpsTokensAndAuditBindToTheKeyID: a form served to one key does not work for another
// key of the same name in the same browser (a replaced key and its successor), and the
// audit log names the key's ID beside its name.
func TestOpsTokensAndAuditBindToTheKeyID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	store := apikey.NewStore(b.pool)
	old, err := store.CreateOps(ctx, "admin", false, apikey.OpsWrite)
	if err != nil {
		t.Fatal(err)
	}
	s := &opsSession{b: b, key: old.Key}
	oldTok := s.token(t)
	// The key is replaced; the browser signs in with the new key of the same name.
	next, err := store.CreateOps(ctx, "admin", true, apikey.OpsWrite)
	if err != nil || len(next.Revoked) != 1 || next.Revoked[0] != old.ID {
		t.Fatalf("replace: %+v, %v", next, err)
	}
	s.key = next.Key
	if rec := s.request(http.MethodPost, "/ops/queues/pause", url.Values{"queue": {"imports"}, "csrf": {oldTok}}); rec.Code != http.StatusForbidden {
		t.Fatalf("the new key with the old key's token: %d; want 403", rec.Code)
	}
	if queuePaused(t, b, "imports") {
		t.Fatal("a refused POST paused the queue")
	}
	tok := s.token(t)
	if tok == oldTok {
		t.Fatal("two keys of one name got one token")
	}
	if rec := s.request(http.MethodPost, "/ops/queues/pause", url.Values{"queue": {"imports"}, "csrf": {tok}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("the new key with its token: %d", rec.Code)
	}
	entries, err := venturi.NewQueue(b.pool, venturi.QueueConfig{}).AuditLog(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := "admin (" + next.ID.String() + ")"; len(entries) != 1 || entries[0].Actor != want {
		t.Fatalf("audit log: %+v; want one entry by %q", entries, want)
	}
}

// TestOpsOriginIsThePublicURL: with Config.PublicURL set, the dashboard's origin check
// compares a POST's Origin (sent without Sec-Fetch-Site) with the public URL's origin,
// scheme included: behind a proxy that terminates TLS, http://host is another origin.
func TestOpsOriginIsThePublicURL(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, PublicURL: "https://bookmarks.example.com"})
	s := &opsSession{b: b, key: b.opsKey(t, "admin", apikey.OpsWrite)}
	tok := s.token(t)
	for _, origin := range []string{"http://bookmarks.example.com", "https://evil.example", "http://example.com"} {
		if rec := s.request(http.MethodPost, "/ops/queues/pause", url.Values{"queue": {"imports"}, "csrf": {tok}}, "Origin", origin); rec.Code != http.StatusForbidden {
			t.Fatalf("a POST from %s: %d; want 403", origin, rec.Code)
		}
	}
	if queuePaused(t, b, "imports") {
		t.Fatal("a refused POST paused the queue")
	}
	if rec := s.request(http.MethodPost, "/ops/queues/pause", url.Values{"queue": {"imports"}, "csrf": {tok}}, "Origin", "https://bookmarks.example.com"); rec.Code != http.StatusSeeOther {
		t.Fatalf("a POST from the public origin: %d; want 303", rec.Code)
	}
}

// TestOpsShowsDeferredMerges: the dashboard's overview shows, by kind, the enqueues from SQL
// that wait for a Go merge (a kind no running worker registered), read live, and its live
// values carry them.
func TestOpsShowsDeferredMerges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := &opsSession{b: b, key: b.opsKey(t, "viewer", apikey.OpsRead)}
	if rec := s.request(http.MethodGet, "/ops/", nil); rec.Code != http.StatusOK ||
		!strings.Contains(rec.Body.String(), `Deferred merges waiting: <strong data-live="d:total">0</strong>`) {
		t.Fatalf("GET /ops/ before any deferred merge: %d %.3000s", rec.Code, rec.Body.String())
	}
	for range 3 {
		if _, err := b.pool.Exec(context.Background(),
			`SELECT venturi_enqueue('crm.sync', '{"contact": 9}', queue => 'parked', dedup_key => 'contact-9')`); err != nil {
			t.Fatal(err)
		}
	}
	rec := s.request(http.MethodGet, "/ops/", nil)
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(body, `Deferred merges waiting: <strong data-live="d:total">2</strong>`) ||
		!strings.Contains(body, `<td class="num" data-live="d:waiting:crm.sync">2</td>`) {
		t.Fatalf("GET /ops/: %d, want crm.sync's 2 deferred merges in %.4000s", rec.Code, body)
	}
	if rec := s.request(http.MethodGet, "/ops/api/stats", nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"d:waiting:crm.sync":"2"`) {
		t.Fatalf("GET /ops/api/stats: %d %s", rec.Code, rec.Body.String())
	}
}
