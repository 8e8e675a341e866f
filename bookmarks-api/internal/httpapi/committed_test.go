package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// request sends method path with a JSON body (none when empty) and the given headers,
// authenticated with the bundle's key unless the headers set Authorization.
func (b *testBundle) request(method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	req.Header.Set("Content-Type", "application/json")
	b.auth(req)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return b.serve(req)
}

// decode is a response's JSON body.
func decode(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("body %q is not JSON: %v", rec.Body.String(), err)
	}
	return out
}

// count is the number of rows of table in the bundle's schema.
func (b *testBundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCommittedCreateIsNeverAnError: once a create's transaction has committed, its answer
// is the success (201, an import 202) even when reading the new resource back fails. Here
// the read fails for real: right after the commit (afterCreateCommit) the test locks
// venturi_job, so the read of the fetch job waits until the request's time limit cancels
// it, the timeout a client was answered 503 "try again later" for, and retried into a
// second bookmark and fetch. The answer is what the transaction wrote, the failure is
// logged, and exactly one resource exists; what the answer showed is what a read shows
// once the lock is gone.
func TestCommittedCreateIsNeverAnError(t *testing.T) {
	t.Parallel()
	var (
		b    *testBundle
		mu   sync.Mutex
		lock pgx.Tx // held from a create's commit until unlock
	)
	cfg := Config{WriteLimit: Unlimited, ImportLimit: Unlimited, RequestTimeout: 3 * time.Second, ImportConfirmAbove: 1}
	cfg.afterCreateCommit = func(context.Context) {
		tx, err := b.pool.Begin(context.Background())
		if err == nil {
			_, err = tx.Exec(context.Background(), "LOCK TABLE venturi_job IN ACCESS EXCLUSIVE MODE")
		}
		if err != nil {
			t.Errorf("lock venturi_job: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		lock = tx
	}
	b = setupWith(t, cfg)
	unlock := func(t *testing.T) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if lock == nil {
			t.Fatal("the create did not commit (no lock was taken after its commit)")
		}
		if err := lock.Rollback(context.Background()); err != nil {
			t.Fatal(err)
		}
		lock = nil
	}

	for _, tt := range []struct {
		name, path, body string
		status           int
		table, get       string
		bookmarks        int // bookmark rows after the create
	}{
		{"bookmark", "/bookmarks", `{"url":"https://example.com/committed","tags":["c"]}`, 201, "bookmark", "/bookmarks/", 1},
		{"bookmark with a wait", "/bookmarks?wait=8s", `{"url":"https://example.com/waited"}`, 201, "bookmark", "/bookmarks/", 2},
		{"import awaiting its confirmation", "/imports", `{"items":[{"url":"https://example.com/i1"},{"url":"https://example.com/i2"}]}`,
			202, "bookmark_import", "/imports/", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rows := b.count(t, tt.table)
			rec := b.request(http.MethodPost, tt.path, tt.body, nil)
			unlock(t)
			if rec.Code != tt.status {
				t.Fatalf("a committed create whose read back failed = %d %s, want %d", rec.Code, rec.Body.String(), tt.status)
			}
			got := decode(t, rec)
			if n := b.count(t, tt.table); n != rows+1 {
				t.Fatalf("%d rows in %s after one create, want %d", n, tt.table, rows+1)
			}
			if n := b.count(t, "bookmark"); n != tt.bookmarks {
				t.Fatalf("%d bookmarks, want %d", n, tt.bookmarks)
			}
			if conf, ok := got["confirmation"].(map[string]any); ok {
				if !strings.Contains(conf["url"].(string), "/confirm/"+confirmPrefix) {
					t.Fatalf("the import's answer lost its confirmation link: %v", got)
				}
				delete(conf, "url") // shown in the create's answer only
			}
			code, read := b.do(t, http.MethodGet, tt.get+got["id"].(string), "")
			if code != 200 || !reflect.DeepEqual(got, read) {
				t.Fatalf("the create answered\n%s\na read shows\n%s", mustJSON(got), mustJSON(read))
			}
		})
	}
	if !strings.Contains(b.logs.String(), "a committed create could not be read back") {
		t.Fatalf("the failed read back is not logged:\n%s", b.logs.String())
	}
}
