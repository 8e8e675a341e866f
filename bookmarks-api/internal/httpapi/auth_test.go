package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/apikey"
)

// requireUnauthorized checks a 401: the challenge header, and a body that does not say why.
func requireUnauthorized(t *testing.T, rec *httptest.ResponseRecorder, what string) {
	t.Helper()
	if rec.Code != 401 {
		t.Fatalf("%s: status %d, want 401; body %s", what, rec.Code, rec.Body.String())
	}
	if got := rec.Header().Get(echo.HeaderWWWAuthenticate); got != wwwAuthenticate {
		t.Fatalf("%s: WWW-Authenticate %q, want %q", what, got, wwwAuthenticate)
	}
	if rec.Body.Len() == 0 { // HEAD
		return
	}
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("%s: body %q: %v", what, rec.Body.String(), err)
	}
	if p.Error.Code != "unauthorized" || p.Error.Message != errUnauthorized.Message || p.Error.RequestID == "" {
		t.Fatalf("%s: problem %+v, want the one generic unauthorized message", what, p.Error)
	}
}

// TestEveryRouteButTheProbesRequiresAKey walks the router: a route added later is covered
// without touching this test (authenticated by default). The one other route without a key
// is the confirmation link, authenticated by its token.
func TestEveryRouteButTheProbesRequiresAKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := ulid.Make().String()
	checked := 0
	for _, r := range b.e.Routes() {
		path := strings.ReplaceAll(r.Path, ":id", id)
		req := httptest.NewRequest(r.Method, path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		rec := b.serve(req)
		if r.Path == confirmLinkRoute { // its token is the credential: a bad one is a 404, never a 401
			if rec.Code != 404 || !strings.Contains(rec.Body.String(), "no such confirmation link") {
				t.Fatalf("%s %s without a key = %d %s, want 404 (an unknown link)", r.Method, r.Path, rec.Code, rec.Body.String())
			}
			continue
		}
		if opsRoutes[r.Path] { // the dashboard: a key with a dashboard role, over HTTP Basic (ops_test.go)
			if rec.Code != 401 || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic ") {
				t.Fatalf("%s %s without a key = %d %q, want 401 with a Basic challenge", r.Method, r.Path, rec.Code, rec.Header().Get("WWW-Authenticate"))
			}
			checked++
			continue
		}
		if publicRoutes[r.Path] {
			if rec.Code != 200 {
				t.Fatalf("%s %s without a key = %d, want 200 (a public probe)", r.Method, r.Path, rec.Code)
			}
			continue
		}
		requireUnauthorized(t, rec, r.Method+" "+r.Path)
		checked++
	}
	if checked < 9 {
		t.Fatalf("only %d routes checked", checked)
	}
	// Unknown routes too: no key, no hint of what exists.
	requireUnauthorized(t, b.serve(httptest.NewRequest("GET", "/nowhere", nil)), "GET /nowhere")
	requireUnauthorized(t, b.serve(httptest.NewRequest("GET", "/healthz/", nil)), "GET /healthz/")
}

func TestBadKeysAreRefusedAlike(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	keys := apikey.NewStore(b.pool)
	revoked := b.newKey(t, "revoked")
	if _, err := keys.Revoke(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	id, _ := apikey.Parse(b.key)
	wrongSecret := apikey.WrongSecret(b.key)
	if _, ok := apikey.Parse(wrongSecret); !ok || wrongSecret == b.key {
		t.Fatal("the wrong-secret key must be well formed, to reach the digest comparison")
	}
	_, unknown, _ := apikey.Generate() // well formed, never stored
	for name, header := range map[string]string{
		"no header":                "",
		"empty bearer":             "Bearer ",
		"basic scheme":             "Basic " + b.key,
		"the key without a scheme": b.key,
		"malformed key":            "Bearer not-a-key",
		"the key's ID alone":       "Bearer " + id.String(),
		"unknown key":              "Bearer " + unknown,
		"right ID, wrong secret":   "Bearer " + wrongSecret,
		"revoked key":              "Bearer " + revoked,
		"two keys in one header":   "Bearer " + b.key + " " + b.key,
	} {
		req := httptest.NewRequest("GET", "/bookmarks", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		requireUnauthorized(t, b.serve(req), name)
	}
	// A key in the query string is not a key: it would end up in logs and browser history.
	requireUnauthorized(t, b.serve(httptest.NewRequest("GET", "/bookmarks?key="+b.key, nil)), "key in the query")
	// HEAD gets the challenge without a body.
	requireUnauthorized(t, b.serve(httptest.NewRequest("HEAD", "/bookmarks", nil)), "HEAD without a key")

	// The valid key works, with the scheme in any case; another valid key works too.
	for _, header := range []string{"Bearer " + b.key, "bearer " + b.key, "Bearer " + b.newKey(t, "second")} {
		req := httptest.NewRequest("GET", "/bookmarks", nil)
		req.Header.Set("Authorization", header)
		if rec := b.serve(req); rec.Code != 200 {
			t.Fatalf("%q: %d %s", header[:10], rec.Code, rec.Body.String())
		}
	}
}

// TestRevokedKeyStopsAtOnce: no cache; the next request after revocation is refused.
func TestRevokedKeyStopsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if code, _ := b.do(t, "GET", "/tags", ""); code != 200 {
		t.Fatalf("before revocation: %d", code)
	}
	if _, err := apikey.NewStore(b.pool).Revoke(context.Background(), b.key); err != nil {
		t.Fatal(err)
	}
	requireUnauthorized(t, b.serve(b.auth(httptest.NewRequest("GET", "/tags", nil))), "after revocation")
}

// TestKeyCheckFailureIsNotA401: when the database cannot answer, the client gets a 500
// without detail (not a 401 that would make it drop a good key), and the probes still say
// what is wrong.
func TestKeyCheckFailureIsNotA401(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.pool.Close()
	rec := b.serve(b.auth(httptest.NewRequest("GET", "/bookmarks", nil)))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"internal error"`) {
		t.Fatalf("status %d %s, want a 500 saying only internal error", rec.Code, rec.Body.String())
	}
	requireNoLeak(t, rec.Body.String())
	if !strings.Contains(b.logs.String(), "API key lookup") {
		t.Fatalf("the cause was not logged: %s", b.logs.String())
	}
}

// TestTheKeyIsNeverLogged: the request log names the key's ID, never the key.
func TestTheKeyIsNeverLogged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.do(t, "GET", "/bookmarks", "")
	id, _ := apikey.Parse(b.key)
	logs := b.logs.String()
	if strings.Contains(logs, b.key) || strings.Contains(logs, b.key[len(b.key)-43:]) {
		t.Fatalf("the key was logged: %s", logs)
	}
	if !strings.Contains(logs, `"key_id":"`+id.String()+`"`) {
		t.Fatalf("the request log lacks the key ID: %s", logs)
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	generated := func(s string) bool { return len(s) == 32 && requestIDPattern.MatchString(s) }
	for _, tt := range []struct {
		name, sent string
		echoed     bool
	}{
		{"safe token", "abc-123_X.y", true},
		{"64 characters", strings.Repeat("a", 64), true},
		{"65 characters", strings.Repeat("a", 65), false},
		{"64 KiB", strings.Repeat("a", 64<<10), false},
		{"space", "a b", false},
		{"quote and angle brackets", `"><script>`, false},
		{"JSON and log injection", `x","level":"ERROR`, false},
		{"non-ASCII", "ünïcode", false},
		{"slash and colon", "a/b:c", false},
		{"empty", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := b.auth(httptest.NewRequest("GET", "/bookmarks/nope", nil)) // a 404 carries request_id in its body
			if tt.sent != "" || tt.name == "empty" {
				req.Header.Set(echo.HeaderXRequestID, tt.sent)
			}
			rec := b.serve(req)
			got := rec.Header().Get(echo.HeaderXRequestID)
			var p Problem
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			if p.Error.RequestID != got {
				t.Fatalf("body request_id %q, header %q", p.Error.RequestID, got)
			}
			if tt.echoed {
				if got != tt.sent {
					t.Fatalf("X-Request-ID %q, want the client's %q echoed", got, tt.sent)
				}
				return
			}
			if !generated(got) {
				t.Fatalf("X-Request-ID %q for a client's %q, want a fresh one", got, tt.sent)
			}
			if tt.sent != "" && strings.Contains(b.logs.String(), tt.sent) {
				t.Fatalf("the client's request ID %q reached the log", tt.sent)
			}
		})
	}
}

// TestCrossSiteRequestsCannotChangeState: the API key is the defence against cross-site
// requests: a browser never attaches it by itself (it is not a cookie), and a page that
// sets the Authorization header needs a CORS preflight, which the API never approves. On
// top of that, the state-changing endpoints refuse the body types of HTML forms and
// no-preflight fetches (415), with or without a key.
func TestCrossSiteRequestsCannotChangeState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, bm := b.do(t, "POST", "/bookmarks", `{"url":"https://a.example/"}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, bm)
	}
	id := bm["id"].(string)
	jobBefore := bm["fetch_job"].(map[string]any)["journal_total"]
	// What a cross-site form or fetch sends: a simple content type, an Origin, no key.
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain", "text/plain;charset=UTF-8"} {
		for _, r := range []struct{ method, path string }{{"POST", "/bookmarks/" + id + "/refetch"}, {"DELETE", "/bookmarks/" + id}} {
			req := httptest.NewRequest(r.method, r.path, strings.NewReader("x=1"))
			req.Header.Set("Content-Type", ct)
			req.Header.Set("Origin", "https://evil.example")
			requireUnauthorized(t, b.serve(req), r.method+" "+ct+" cross-site")
			// Even with a key (a key stolen into a page could be set only with a preflight).
			rec := b.serve(b.auth(req))
			if rec.Code != http.StatusUnsupportedMediaType {
				t.Fatalf("%s %s with %s and a key: %d, want 415", r.method, r.path, ct, rec.Code)
			}
		}
	}
	// The preflight a page needs to send the Authorization header is never approved.
	pre := httptest.NewRequest("OPTIONS", "/bookmarks/"+id+"/refetch", nil)
	pre.Header.Set("Origin", "https://evil.example")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	pre.Header.Set("Access-Control-Request-Headers", "authorization")
	if rec := b.serve(pre); rec.Header().Get("Access-Control-Allow-Origin") != "" || rec.Header().Get("Access-Control-Allow-Headers") != "" {
		t.Fatalf("the preflight was approved: %v", rec.Header())
	}
	// Nothing changed: the bookmark exists and its fetch job saw no refetch.
	code, got := b.do(t, "GET", "/bookmarks/"+id, "")
	if code != 200 || got["fetch_job"].(map[string]any)["journal_total"] != jobBefore {
		t.Fatalf("after the cross-site requests: %d %v", code, got)
	}
	// The body-less endpoints still take curl's request without a body, or a JSON one.
	for _, ct := range []string{"", "application/json"} {
		req := b.auth(httptest.NewRequest("POST", "/bookmarks/"+id+"/refetch", nil))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if rec := b.serve(req); rec.Code != 202 {
			t.Fatalf("refetch with Content-Type %q: %d %s", ct, rec.Code, rec.Body.String())
		}
	}
}
