package httpapi

import (
	"regexp"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// leakMarkers are pieces of internal detail that must never appear in a response: Go's
// network and database error texts, pgx's, PostgreSQL's.
var leakMarkers = []string{"tcp", "dial", "read ", "i/o", "127.0.0.1", "::1", "pgx", "pgconn", "SQLSTATE", "closed pool",
	"connection", "goroutine", "panic", "venturi:", "violates", "relation "}

// requestIDField is an error body's request ID: random letters, which may spell a leak
// marker ("pgx" in "...LTpJQpgxSk...") by chance, so it is blanked before the check.
var requestIDField = regexp.MustCompile(`"request_id":"[^"]*"`)

// requireNoLeak fails if an error body carries internal detail.
func requireNoLeak(t testing.TB, body string) {
	t.Helper()
	body = requestIDField.ReplaceAllString(body, `"request_id":""`)
	for _, m := range leakMarkers {
		if strings.Contains(body, m) {
			t.Fatalf("the response %q carries internal detail (%q)", body, m)
		}
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unknown := ulid.Make().String()
	big := `{"url":"https://a/","title":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, tt := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"POST", "/bookmarks", `{"url":`, 400, ""},
		{"POST", "/bookmarks", `not json`, 400, ""},
		{"POST", "/bookmarks", ``, 400, ""},
		{"POST", "/bookmarks", `{"url":"https://a/"} {}`, 400, ""},
		{"POST", "/bookmarks", `{"url":5}`, 400, ""},
		{"POST", "/bookmarks", `[]`, 400, ""},
		{"POST", "/bookmarks", big, 413, ""},
		{"POST", "/bookmarks", `{}`, 422, "url"},
		{"POST", "/bookmarks", `{"url":"ftp://a/"}`, 422, "url"},
		{"POST", "/bookmarks", `{"url":"https://u:p@a/"}`, 422, "url"},
		{"POST", "/bookmarks", `{"url":"https:///nohost"}`, 422, "url"},
		{"POST", "/bookmarks", `{"url":"https://a/\u0000"}`, 422, "url"},
		{"POST", "/bookmarks", `{"url":"https://a/","tags":["no spaces"]}`, 422, "tags"},
		{"POST", "/bookmarks", `{"url":"https://a/","title":"` + strings.Repeat("t", 501) + `"}`, 422, "title"},
		{"GET", "/bookmarks?limit=0", "", 422, "limit"},
		{"GET", "/bookmarks?limit=x", "", 422, "limit"},
		{"GET", "/bookmarks?before=nope", "", 422, "before"},
		{"GET", "/bookmarks/" + unknown, "", 404, ""},
		{"GET", "/bookmarks/not-an-id", "", 404, ""},
		{"POST", "/bookmarks/" + unknown + "/refetch", "", 404, ""},
		{"DELETE", "/bookmarks/" + unknown, "", 404, ""},
		{"GET", "/imports/" + unknown, "", 404, ""},
		{"DELETE", "/imports/" + unknown, "", 404, ""},
		{"POST", "/imports/" + unknown + "/confirm", "", 404, ""},
		{"POST", "/bookmarks?wait=5", `{"url":"https://a/"}`, 400, "wait"},
		{"POST", "/imports", `{"items":[]}`, 422, "items"},
		{"POST", "/imports", `{"items":[{"url":"https://a/"}],"page_size":-1}`, 422, "page_size"},
		{"POST", "/tags/rebuild", `{}`, 422, "tags"},
		{"POST", "/tags/rebuild", `{"tags":["a"],"delay_ms":-5}`, 422, "delay_ms"},
		{"GET", "/nowhere", "", 404, ""},
		{"PUT", "/bookmarks", "", 405, ""},
	} {
		t.Run(tt.method+" "+tt.path+" "+tt.body[:min(len(tt.body), 30)], func(t *testing.T) {
			code, body := b.do(t, tt.method, tt.path, tt.body)
			if code != tt.status {
				t.Fatalf("status = %d, want %d; body %v", code, tt.status, body)
			}
			detail := body["error"].(map[string]any)
			if detail["request_id"] == "" || detail["message"] == "" {
				t.Fatalf("problem = %v", detail)
			}
			if tt.field != "" {
				if fields, _ := detail["fields"].(map[string]any); fields[tt.field] == nil {
					t.Fatalf("no message for field %s: %v", tt.field, detail)
				}
			}
		})
	}
}

func TestInternalErrorsDoNotLeak(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if code, _ := b.do(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz = %d", code)
	}
	b.pool.Close() // the database goes away
	code, body := b.do(t, "GET", "/bookmarks", "")
	if code != 500 {
		t.Fatalf("status = %d", code)
	}
	if msg := body["error"].(map[string]any)["message"]; msg != "internal error" {
		t.Fatalf("message = %v: an internal error leaked", msg)
	}
	if code, _ := b.do(t, "GET", "/readyz", ""); code != 503 {
		t.Fatalf("readyz = %d, want 503", code)
	}
	if code, _ := b.do(t, "GET", "/healthz", ""); code != 200 {
		t.Fatalf("healthz = %d", code)
	}
}

// TestRequireNoLeakIgnoresTheRequestID: a random request ID that spells a marker is not a
// leak (TestOpsRequiresAnOpsKey failed on "...LTpJQpgxSk..."); the message still counts.
func TestRequireNoLeakIgnoresTheRequestID(t *testing.T) {
	t.Parallel()
	requireNoLeak(t, `{"error":{"code":"unauthorized","message":"no","request_id":"wkcLTpJQpgxSkPjrtLXePsgpJxwpjnfg"}}`)
	body := requestIDField.ReplaceAllString(`{"error":{"message":"pgx: closed","request_id":"x"}}`, `"request_id":""`)
	if !strings.Contains(body, "pgx") {
		t.Fatal("blanking the request ID removed the message")
	}
}
