package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"
)

// TestAnswersAreNotStored: every answer of the API, successes and errors alike (401, 404,
// 405, 400, 413, 415, 422, 429), the probes and the confirmation link included, carries
// Cache-Control: no-store.
func TestAnswersAreNotStored(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: RateLimit{PerSecond: 1.0 / 3600, Burst: 5}, ImportLimit: Unlimited})
	code, bm := b.do(t, http.MethodPost, "/bookmarks", `{"url":"https://example.com/"}`)
	if code != 201 {
		t.Fatalf("create = %d %v", code, bm)
	}
	unknown := ulid.Make().String()
	for _, tt := range []struct {
		method, path, body, contentType string
		key                             bool
		status                          int
	}{
		{"GET", "/healthz", "", "", false, 200},
		{"HEAD", "/healthz", "", "", false, 200},
		{"GET", "/readyz", "", "", false, 200},
		{"GET", "/bookmarks", "", "", true, 200},
		{"GET", "/bookmarks/" + bm["id"].(string), "", "", true, 200},
		{"GET", "/events", "", "", true, 200},
		{"GET", "/tags", "", "", true, 200},
		{"GET", "/bookmarks", "", "", false, 401},
		{"GET", "/bookmarks/" + unknown, "", "", true, 404},
		{"HEAD", "/bookmarks/" + unknown, "", "", true, 405},
		{"GET", "/nowhere", "", "", true, 404},
		{"PUT", "/bookmarks", "", "", true, 405},
		{"GET", "/events?limit=x", "", "", true, 400},
		{"POST", "/bookmarks", `{"url":"https://a/","title":"` + strings.Repeat("x", 70<<10) + `"}`, "application/json", true, 413},
		{"POST", "/bookmarks", `url=x`, "application/x-www-form-urlencoded", true, 415},
		{"POST", "/bookmarks", `{"url":"ftp://a/"}`, "application/json", true, 422},
		{"POST", "/imports/" + unknown + "/confirm/" + confirmPrefix + strings.Repeat("A", 43), "", "", false, 404},
		{"POST", "/bookmarks", `{"url":"https://example.com/2"}`, "application/json", true, 201},
		{"POST", "/bookmarks", `{"url":"https://example.com/3"}`, "application/json", true, 429},
	} {
		var req *http.Request
		if tt.body != "" {
			req = httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
		} else {
			req = httptest.NewRequest(tt.method, tt.path, nil)
		}
		if tt.key {
			b.auth(req)
		}
		rec := b.serve(req)
		if rec.Code != tt.status || rec.Header().Get(echo.HeaderCacheControl) != "no-store" {
			t.Errorf("%s %s = %d, Cache-Control %q; want %d and no-store", tt.method, tt.path, rec.Code,
				rec.Header().Get(echo.HeaderCacheControl), tt.status)
		}
	}
}
