package httpapi

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"
)

// requireRateLimited checks a 429: Retry-After as given, and the problem body.
func requireRateLimited(t *testing.T, rec *httptest.ResponseRecorder, retryAfter, what string) {
	t.Helper()
	if rec.Code != 429 {
		t.Fatalf("%s: status %d, want 429; body %s", what, rec.Code, rec.Body.String())
	}
	if got := rec.Header().Get(echo.HeaderRetryAfter); got != retryAfter {
		t.Fatalf("%s: Retry-After %q, want %q", what, got, retryAfter)
	}
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Error.Code != "rate_limited" || p.Error.RequestID == "" {
		t.Fatalf("%s: body %s (%v)", what, rec.Body.String(), err)
	}
}

// TestWriteRateLimitPerKey: every write endpoint draws on the key's bucket; an empty
// bucket is 429 with Retry-After and does nothing; reads are not limited; another key has
// its own bucket.
func TestWriteRateLimitPerKey(t *testing.T) {
	t.Parallel()
	// One request per 1000 s after a burst of 5: nothing refills during the test.
	b := setupWith(t, Config{WriteLimit: RateLimit{PerSecond: 0.001, Burst: 5}, ImportLimit: Unlimited})
	unknown := ulid.Make().String()
	writes := []struct{ method, path, body string }{
		{"POST", "/bookmarks", `{"url":"https://a.example/"}`},
		{"POST", "/bookmarks/" + unknown + "/refetch", ""},
		{"DELETE", "/bookmarks/" + unknown, ""},
		{"POST", "/imports", `{"items":[{"url":"https://a.example/"}]}`},
		{"POST", "/tags/rebuild", `{"tags":["a"]}`},
	}
	send := func(key, method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		return b.serve(req)
	}
	for _, w := range writes { // the burst: one of each
		if rec := send(b.key, w.method, w.path, w.body); rec.Code == 429 {
			t.Fatalf("%s %s within the burst: 429", w.method, w.path)
		}
	}
	for _, w := range writes { // the bucket is empty: every write endpoint refuses
		requireRateLimited(t, send(b.key, w.method, w.path, w.body), "1000", w.method+" "+w.path)
	}
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM bookmark").Scan(&n); err != nil || n != 1 {
		t.Fatalf("bookmarks = %d (%v), want 1: a refused create must not write", n, err)
	}
	// Reads are not limited.
	for range 10 {
		if rec := send(b.key, "GET", "/bookmarks", ""); rec.Code != 200 {
			t.Fatalf("GET /bookmarks with an empty write bucket: %d", rec.Code)
		}
	}
	// Another key has its own bucket.
	other := b.newKey(t, "other")
	if rec := send(other, "POST", "/tags/rebuild", `{"tags":["b"]}`); rec.Code != 202 {
		t.Fatalf("another key: %d %s", rec.Code, rec.Body.String())
	}
}

// TestWriteRateLimitRefills: after a refusal, waiting (here: polling with a deadline) lets
// the key write again, and Retry-After is the refill time of one request.
func TestWriteRateLimitRefills(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: RateLimit{PerSecond: 1, Burst: 1}, ImportLimit: Unlimited})
	path := "/bookmarks/" + ulid.Make().String() + "/refetch"
	refetch := func() *httptest.ResponseRecorder { return b.serve(b.auth(httptest.NewRequest("POST", path, nil))) }
	if rec := refetch(); rec.Code != 404 {
		t.Fatalf("first: %d", rec.Code)
	}
	requireRateLimited(t, refetch(), "1", "second at once")
	deadline := time.Now().Add(10 * time.Second)
	for rec := refetch(); rec.Code != 404; rec = refetch() {
		if rec.Code != 429 {
			t.Fatalf("while refilling: %d", rec.Code)
		}
		if time.Now().After(deadline) {
			t.Fatal("the bucket did not refill within 10s at 1 request per second")
		}
		select { // poll: the bucket refills in about a second
		case <-time.After(50 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// TestImportRateLimit: imports have a limit of their own on top of the write limit.
func TestImportRateLimit(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: RateLimit{PerSecond: 1.0 / 3600, Burst: 2}})
	body := `{"items":[{"url":"https://example.com/"}]}`
	for i := range 2 {
		if code, out := b.do(t, "POST", "/imports", body); code != 202 {
			t.Fatalf("import %d: %d %v", i, code, out)
		}
	}
	req := b.auth(httptest.NewRequest("POST", "/imports", strings.NewReader(body)))
	req.Header.Set("Content-Type", "application/json")
	requireRateLimited(t, b.serve(req), "3600", "third import")
	// Other writes are not held back by the import limit.
	if code, _ := b.do(t, "POST", "/tags/rebuild", `{"tags":["a"]}`); code != 202 {
		t.Fatalf("a write after the import limit: %d", code)
	}
}

// TestDefaultRateLimits: a zero Config gets the defaults, and they let a person work. The
// requests are malformed creates (400 before any database work, but after the limiter),
// so that they are far quicker than the refill of 10 per second.
func TestDefaultRateLimits(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{})
	send := func() *httptest.ResponseRecorder {
		req := b.auth(httptest.NewRequest("POST", "/bookmarks", strings.NewReader(`{`)))
		req.Header.Set("Content-Type", "application/json")
		return b.serve(req)
	}
	for i := range DefaultWriteLimit.Burst {
		if rec := send(); rec.Code != 400 {
			t.Fatalf("write %d of the default burst: %d", i, rec.Code)
		}
	}
	// The burst is spent; the refill may have added a request or two meanwhile.
	for i := 0; ; i++ {
		rec := send()
		if rec.Code == 429 {
			requireRateLimited(t, rec, "1", "past the default burst")
			break
		}
		if i == 1000 {
			t.Fatal("the default write limit never refused")
		}
	}
}

func TestRateLimitValidate(t *testing.T) {
	t.Parallel()
	for _, l := range []RateLimit{DefaultWriteLimit, DefaultImportLimit, Unlimited, {PerSecond: 0.5, Burst: 1}} {
		if err := l.Validate(); err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
	}
	for _, l := range []RateLimit{{PerSecond: 0, Burst: 1}, {PerSecond: -1, Burst: 1}, {PerSecond: 1, Burst: 0}} {
		if err := l.Validate(); err == nil {
			t.Fatalf("%+v: no error", l)
		}
	}
	if got := DefaultImportLimit.retryAfter(); got != 60 {
		t.Fatalf("import Retry-After = %d, want 60", got)
	}
}
