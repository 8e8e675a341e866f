package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

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
