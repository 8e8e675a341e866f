package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/apikey"
	"github.com/venturi-dev/bookmarks/sql/dbtest"
	"github.com/venturi-dev/bookmarks/sql/migrations"
)

type testBundle struct {
	e    *echo.Echo
	api  *API // the handlers' state behind e
	pool *pgxpool.Pool
	key  string      // a valid API key, sent by do and auth
	logs *safeBuffer // what the API logged (JSON lines)
}

// setup serves the API on a fresh schema with an API key and no rate limits (the rate
// limits have their own tests, which pass a Config to setupWith).
func setup(t testing.TB) *testBundle {
	t.Helper()
	return setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited})
}

func setupWith(t testing.TB, cfg Config) *testBundle {
	t.Helper()
	return setupPool(t, cfg, 5)
}

// setupPool is setupWith on a pool of at most maxConns connections.
func setupPool(t testing.TB, cfg Config, maxConns int32) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t, "bma", maxConns)
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	k, err := apikey.NewStore(pool).Create(ctx, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	logs := &safeBuffer{}
	e, api := newAPI(pool, slog.New(slog.NewJSONHandler(logs, nil)), cfg)
	return &testBundle{e: e, api: api, pool: pool, key: k.Key, logs: logs}
}

// safeBuffer is a bytes.Buffer for concurrent writers.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// auth sets the bundle's API key on req.
func (b *testBundle) auth(req *http.Request) *http.Request {
	req.Header.Set("Authorization", "Bearer "+b.key)
	return req
}

// newKey creates another API key.
func (b *testBundle) newKey(t testing.TB, name string) string {
	t.Helper()
	k, err := apikey.NewStore(b.pool).Create(context.Background(), name, false)
	if err != nil {
		t.Fatal(err)
	}
	return k.Key
}

// serve sends req through the whole Echo stack.
func (b *testBundle) serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	b.e.ServeHTTP(rec, req)
	return rec
}

func (b *testBundle) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	req.Header.Set("Content-Type", "application/json")
	rec := b.serve(b.auth(req))
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: body %q is not JSON", method, path, rec.Body.String())
		}
	}
	if rec.Header().Get(echo.HeaderXRequestID) == "" {
		t.Fatalf("%s %s: no request ID", method, path)
	}
	if rec.Code >= 400 {
		requireNoLeak(t, rec.Body.String())
	}
	return rec.Code, out
}

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

func TestBookmarkLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, bm := b.do(t, "POST", "/bookmarks", `{"url":"https://Example.com/a#frag","title":" A ","tags":["Go","db","go"]}`)
	if code != 201 || bm["url"] != "https://example.com/a" || bm["title"] != "A" || bm["fetch_status"] != "pending" {
		t.Fatalf("create = %d %v", code, bm)
	}
	if tags := bm["tags"].([]any); len(tags) != 2 || tags[0] != "go" {
		t.Fatalf("tags = %v", tags)
	}
	job := bm["fetch_job"].(map[string]any)
	// An interactive fetch: the default queue, and its host's partition.
	if job["state"] != "available" || job["kind"] != "fetch_bookmark" || job["queue"] != "default" || job["partition"] != "example.com" {
		t.Fatalf("fetch job = %v", job)
	}
	if _, ok := job["circuit"]; ok {
		t.Fatalf("fetch job shows a circuit before any fetch: %v", job)
	}
	id := bm["id"].(string)

	code, got := b.do(t, "GET", "/bookmarks/"+id, "")
	if code != 200 || got["id"] != id {
		t.Fatalf("get = %d %v", code, got)
	}
	// The create's answer is built from what its transaction wrote (no read back of the
	// bookmark): it must be what a read shows while the fetch has not run.
	if !reflect.DeepEqual(bm, got) {
		t.Fatalf("create answered %v, a read shows %v", bm, got)
	}
	// Refetches coalesce into the pending job.
	code, r1 := b.do(t, "POST", "/bookmarks/"+id+"/refetch", "")
	_, r2 := b.do(t, "POST", "/bookmarks/"+id+"/refetch", "")
	if code != 202 || r1["job_id"] != job["id"] || r2["job_id"] != job["id"] || r2["action"] != "replaced" {
		t.Fatalf("refetch = %d %v %v, want both in job %v", code, r1, r2, job["id"])
	}
	// The tag rebuild was enqueued with a delay and merges.
	code, tr := b.do(t, "POST", "/tags/rebuild", `{"tags":["web"]}`)
	if code != 202 || tr["action"] != "merged" {
		t.Fatalf("tags/rebuild = %d %v", code, tr)
	}
	code, list := b.do(t, "GET", "/bookmarks?limit=1", "")
	if _, more := list["next"]; code != 200 || len(list["items"].([]any)) != 1 || more { // the only page: no next
		t.Fatalf("list = %d %v", code, list)
	}
	code, list = b.do(t, "GET", "/bookmarks?before="+id, "")
	if code != 200 || len(list["items"].([]any)) != 0 {
		t.Fatalf("second page = %d %v", code, list)
	}
	code, list = b.do(t, "GET", "/bookmarks?tag=db", "")
	if code != 200 || len(list["items"].([]any)) != 1 {
		t.Fatalf("by tag = %d %v", code, list)
	}
	if code, _ := b.do(t, "GET", "/tags", ""); code != 200 {
		t.Fatalf("tags = %d", code)
	}
	if code, _ := b.do(t, "DELETE", "/bookmarks/"+id, ""); code != 204 {
		t.Fatalf("delete = %d", code)
	}
	if code, _ := b.do(t, "GET", "/bookmarks/"+id, ""); code != 404 {
		t.Fatalf("get deleted = %d", code)
	}
}

func TestImports(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, imp := b.do(t, "POST", "/imports", `{"items":[{"url":"https://a/"},{"url":"https://b/","title":"b"}],"tags":["imported"],"page_size":1}`)
	if job := imp["job"].(map[string]any); code != 202 || imp["total"] != float64(2) || imp["status"] != "pending" ||
		job["kind"] != "import_bookmarks" || job["queue"] != "imports" {
		t.Fatalf("create import = %d %v", code, imp)
	}
	if code, got := b.do(t, "GET", "/imports/"+imp["id"].(string), ""); code != 200 || got["id"] != imp["id"] {
		t.Fatalf("get import = %d %v", code, got)
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
