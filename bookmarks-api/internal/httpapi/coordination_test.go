package httpapi

// Cancelling imports, confirming large ones (with a key or the one-time link), and
// POST /bookmarks?wait=, against a real PostgreSQL, a real venturi queue and, where jobs
// must run, a real venturi worker with stand-in handlers (the real ones are
// bookmarks-worker's; the e2e suite runs those).

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

type (
	fetchFunc  = venturi.HandlerFunc[tasks.FetchBookmark, struct{}, tasks.FetchCarry]
	importFunc = venturi.HandlerFunc[tasks.ImportBookmarks, struct{}, tasks.ImportCarry]
)

// startWorker runs a venturi worker on the bundle's schema with the given handlers (nil:
// the kind is not run), serving both queues.
func (b *testBundle) startWorker(t *testing.T, fetch fetchFunc, imp importFunc) {
	t.Helper()
	w, err := venturi.NewWorker(b.pool, struct{}{}, venturi.Config{
		Queues:       []venturi.WorkerQueue{{Name: venturi.DefaultQueue, Concurrency: 2}, {Name: tasks.QueueImports, Concurrency: 2}},
		PollInterval: 20 * time.Millisecond, ShutdownGrace: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if fetch != nil {
		if err := venturi.RegisterFunc(w, fetch); err != nil {
			t.Fatal(err)
		}
	}
	if imp != nil {
		if err := venturi.RegisterFunc(w, imp); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

// eventually polls cond every 10ms until it holds, failing the test after 15s.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s; last: %s", what, state)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// importJob returns the job of an import's answer.
func importJob(imp map[string]any) map[string]any {
	j, _ := imp["job"].(map[string]any)
	return j
}

// lastEntry is the last journal entry of a job in an answer.
func lastEntry(job map[string]any) map[string]any {
	j, _ := job["journal"].([]any)
	if len(j) == 0 {
		return nil
	}
	return j[len(j)-1].(map[string]any)
}

// waitImport polls GET /imports/{id} until its job is in state.
func (b *testBundle) waitImport(t *testing.T, id, state string) map[string]any {
	t.Helper()
	var imp map[string]any
	eventually(t, "import "+id+" "+state, func() (bool, string) {
		var code int
		code, imp = b.do(t, "GET", "/imports/"+id, "")
		j := importJob(imp)
		return code == 200 && j != nil && j["state"] == state, mustJSON(imp)
	})
	return imp
}

func mustJSON(v any) string {
	s, _ := json.Marshal(v)
	return string(s)
}

// importBody is a POST /imports body of n items; pageSize picks the stand-in handler's
// behaviour in TestCancelImport.
func importBody(n, pageSize int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = `{"url":"https://example.com/` + ulid.Make().String() + `"}`
	}
	return `{"items":[` + strings.Join(items, ",") + `],"page_size":` + jsonInt(pageSize) + `}`
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// Stand-in import behaviours, chosen by page size.
const (
	completesAtOnce = 11 // the import completes in one run
	holdsUntilAsked = 12 // the run holds until its Shutdown closes, then pauses with a checkpoint
)

func TestCancelImport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keyID, _ := keyIDOf(b.key)

	// A pending import ends at once: 200, status cancelled, the reason in the journal.
	code, imp := b.do(t, "POST", "/imports", importBody(3, 0))
	id := imp["id"].(string)
	if code != 202 || imp["status"] != "pending" {
		t.Fatalf("create = %d %v", code, imp)
	}
	code, got := b.do(t, "DELETE", "/imports/"+id, "")
	if e := lastEntry(importJob(got)); code != 200 || got["status"] != "cancelled" || got["finished_at"] == nil ||
		importJob(got)["state"] != "cancelled" || e["event"] != "cancelled" || e["note"] != "cancelled with API key "+keyID {
		t.Fatalf("cancel a pending import = %d %s", code, mustJSON(got))
	}
	if code, got := b.do(t, "DELETE", "/imports/"+id, ""); code != 200 || got["status"] != "cancelled" {
		t.Fatalf("cancel again = %d %v", code, got)
	}
	if code, got := b.do(t, "GET", "/imports/"+id, ""); code != 200 || got["status"] != "cancelled" {
		t.Fatalf("get cancelled = %d %v", code, got)
	}
	// A form body is refused like on every state-changing endpoint without a body.
	req := httptest.NewRequest("DELETE", "/imports/"+id, strings.NewReader("a=b"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if rec := b.serve(b.auth(req)); rec.Code != 415 {
		t.Fatalf("DELETE with a form body = %d", rec.Code)
	}

	var shutdownSeen atomic.Bool
	b.startWorker(t, nil, func(ctx context.Context, task tasks.ImportBookmarks, run *venturi.Run[tasks.ImportCarry], _ struct{}) (venturi.Outcome, error) {
		if task.PageSize == holdsUntilAsked {
			select {
			case <-run.Shutdown():
				shutdownSeen.Store(true)
				run.SetCarry(tasks.ImportCarry{Next: 5, Imported: 5, Pages: 1})
				return venturi.PauseInWith(0, "page 1"), nil
			case <-ctx.Done():
				return venturi.Outcome{}, ctx.Err()
			}
		}
		return venturi.Completed(), nil
	})

	// A finished import cannot be cancelled: 409.
	_, done := b.do(t, "POST", "/imports", importBody(1, completesAtOnce))
	b.waitImport(t, done["id"].(string), "completed")
	if code, got := b.do(t, "DELETE", "/imports/"+done["id"].(string), ""); code != 409 ||
		got["error"].(map[string]any)["code"] != "conflict" {
		t.Fatalf("cancel a completed import = %d %v", code, got)
	}

	// A running import is asked to stop: 202 while its run ends, then cancelled.
	_, running := b.do(t, "POST", "/imports", importBody(10, holdsUntilAsked))
	rid := running["id"].(string)
	b.waitImport(t, rid, "running")
	code, got = b.do(t, "DELETE", "/imports/"+rid, "")
	if code != 202 || got["status"] != "cancelled" {
		t.Fatalf("cancel a running import = %d %s", code, mustJSON(got))
	}
	got = b.waitImport(t, rid, "cancelled")
	if !shutdownSeen.Load() || got["status"] != "cancelled" || importJob(got)["failures"] != float64(0) ||
		!strings.HasPrefix(lastEntry(importJob(got))["note"].(string), "cancelled with API key "+keyID) {
		t.Fatalf("the running import after its cancel: %s", mustJSON(got))
	}
}

// keyIDOf is the ID part of a key, bmk_<id>_<secret>.
func keyIDOf(key string) (string, bool) {
	parts := strings.Split(key, "_")
	return parts[1], len(parts) == 3
}

// signals reads the confirmation signals an import's job received.
func signals(t *testing.T, pool *pgxpool.Pool, imp map[string]any) []tasks.ImportConfirmation {
	t.Helper()
	job, err := ulid.ParseStrict(importJob(imp)["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(context.Background(), "SELECT payload FROM venturi_signal WHERE job_id = $1 AND name = $2 AND delivery_id = $3 ORDER BY seq",
		uuidOf(job), tasks.SignalConfirmImport, tasks.ConfirmDeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tasks.ImportConfirmation, error) {
		var raw []byte
		var c tasks.ImportConfirmation
		if err := r.Scan(&raw); err != nil {
			return c, err
		}
		return c, json.Unmarshal(raw, &c)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// post sends a POST without a key (the confirmation link).
func (b *testBundle) post(t *testing.T, path string) (int, map[string]any) {
	t.Helper()
	rec := b.serve(httptest.NewRequest("POST", path, nil))
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("POST %s: body %q", path, rec.Body.String())
	}
	if rec.Code >= 400 {
		requireNoLeak(t, rec.Body.String())
	}
	return rec.Code, out
}

func linkPath(t *testing.T, imp map[string]any, public string) string {
	t.Helper()
	c, _ := imp["confirmation"].(map[string]any)
	u, _ := c["url"].(string)
	path, ok := strings.CutPrefix(u, public)
	if !ok || !strings.HasPrefix(path, "/imports/"+imp["id"].(string)+"/confirm/"+confirmPrefix) {
		t.Fatalf("confirmation url %q, want %s/imports/<id>/confirm/bmc_...", u, public)
	}
	return path
}

func TestConfirmImport(t *testing.T) {
	t.Parallel()
	const public = "https://bookmarks.example.com/api"
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, ImportConfirmAbove: 2,
		ImportConfirmTimeout: time.Hour, PublicURL: public + "/"})
	keyID, _ := keyIDOf(b.key)
	ctx := context.Background()

	// At the threshold: no confirmation.
	code, small := b.do(t, "POST", "/imports", importBody(2, 0))
	if _, has := small["confirmation"]; code != 202 || small["status"] != "pending" || has {
		t.Fatalf("an import of 2 = %d %v", code, small)
	}
	if code, got := b.do(t, "POST", "/imports/"+small["id"].(string)+"/confirm", ""); code != 409 ||
		got["error"].(map[string]any)["message"] != errNoConfirmation.msg {
		t.Fatalf("confirm an import that needs none = %d %v", code, got)
	}

	// Over it: awaiting_confirmation, with a link shown once and an expiry an hour away.
	start := time.Now()
	code, imp := b.do(t, "POST", "/imports", importBody(3, 0))
	if code != 202 || imp["status"] != "awaiting_confirmation" {
		t.Fatalf("an import of 3 = %d %v", code, imp)
	}
	link := linkPath(t, imp, public)
	token := link[strings.LastIndex(link, "/")+1:]
	expires, err := time.Parse(time.RFC3339Nano, imp["confirmation"].(map[string]any)["expires_at"].(string))
	if err != nil || expires.Before(start.Add(59*time.Minute)) || expires.After(time.Now().Add(61*time.Minute)) {
		t.Fatalf("expires_at %v (%v), want an hour from now", expires, err)
	}
	id := imp["id"].(string)
	code, got := b.do(t, "GET", "/imports/"+id, "")
	if c := got["confirmation"].(map[string]any); code != 200 || c["url"] != nil || c["expires_at"] == nil {
		t.Fatalf("GET shows the link again: %v", got)
	}
	// Only the token's digest is stored.
	var stored []byte
	if err := b.pool.QueryRow(ctx, "SELECT token_hash FROM bookmark_import_confirmation").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256([]byte(token)); string(stored) != string(sum[:]) {
		t.Fatal("the stored digest is not the token's SHA-256")
	}

	// With the key: 202, one signal however often it is sent.
	for range 2 {
		if code, got := b.do(t, "POST", "/imports/"+id+"/confirm", ""); code != 202 || got["id"] != id {
			t.Fatalf("confirm = %d %v", code, got)
		}
	}
	if s := signals(t, b.pool, imp); len(s) != 1 || s[0] != (tasks.ImportConfirmation{Via: "api_key", KeyID: keyID}) {
		t.Fatalf("signals %+v, want one from the key", s)
	}

	// With the link, without a key: once.
	_, imp2 := b.do(t, "POST", "/imports", importBody(3, 0))
	link2 := linkPath(t, imp2, public)
	if code, got := b.post(t, link2); code != 202 || got["confirmed"] != true || got["import_id"] != imp2["id"] || len(got) != 2 {
		t.Fatalf("the link = %d %v", code, got)
	}
	if s := signals(t, b.pool, imp2); len(s) != 1 || s[0] != (tasks.ImportConfirmation{Via: "link"}) {
		t.Fatalf("signals %+v, want one from the link", s)
	}
	tok2 := link2[strings.LastIndex(link2, "/")+1:]
	wrong := tok2[:len(tok2)-2] + map[bool]string{true: "AA", false: "AQ"}[strings.HasSuffix(tok2, "AQ")]
	for what, path := range map[string]string{
		"used":            link2,
		"wrong secret":    "/imports/" + imp2["id"].(string) + "/confirm/" + wrong,
		"another's token": "/imports/" + imp2["id"].(string) + "/confirm/" + token,
		"malformed":       "/imports/" + imp2["id"].(string) + "/confirm/bmc_x",
		"unknown import":  "/imports/" + ulid.Make().String() + "/confirm/" + tok2,
		"bad import id":   "/imports/nope/confirm/" + tok2,
	} {
		if code, got := b.post(t, path); code != 404 || got["error"].(map[string]any)["message"] != "no such confirmation link: it is unknown, expired or already used" {
			t.Fatalf("%s link = %d %v", what, code, got)
		}
	}
	if s := signals(t, b.pool, imp2); len(s) != 1 {
		t.Fatalf("%d signals after the refused links", len(s))
	}

	// An expired confirmation: the link is refused, and so is the key (the window closed).
	_, imp3 := b.do(t, "POST", "/imports", importBody(3, 0))
	if _, err := b.pool.Exec(ctx, "UPDATE bookmark_import_confirmation SET expires_at = now() - interval '1 second' WHERE import_id = $1",
		uuidOf(ulid.MustParseStrict(imp3["id"].(string)))); err != nil {
		t.Fatal(err)
	}
	if code, _ := b.post(t, linkPath(t, imp3, public)); code != 404 {
		t.Fatalf("an expired link = %d", code)
	}
	if code, got := b.do(t, "POST", "/imports/"+imp3["id"].(string)+"/confirm", ""); code != 409 ||
		got["error"].(map[string]any)["message"] != errConfirmationEnded.msg {
		t.Fatalf("confirm after the expiry = %d %v", code, got)
	}

	// A cancelled import: refused both ways.
	_, imp4 := b.do(t, "POST", "/imports", importBody(3, 0))
	if code, got := b.do(t, "DELETE", "/imports/"+imp4["id"].(string), ""); code != 200 || got["status"] != "cancelled" {
		t.Fatalf("cancel an import awaiting its confirmation = %d %v", code, got)
	}
	if code, got := b.do(t, "POST", "/imports/"+imp4["id"].(string)+"/confirm", ""); code != 409 ||
		got["error"].(map[string]any)["message"] != errImportEnded.msg {
		t.Fatalf("confirm a cancelled import = %d %v", code, got)
	}
	if code, _ := b.post(t, linkPath(t, imp4, public)); code != 404 {
		t.Fatalf("the link of a cancelled import = %d", code)
	}

	// One link, many requests at once: exactly one confirms.
	_, imp5 := b.do(t, "POST", "/imports", importBody(3, 0))
	link5 := linkPath(t, imp5, public)
	var wg sync.WaitGroup
	var ok, refused atomic.Int32
	for range 8 {
		wg.Go(func() {
			rec := b.serve(httptest.NewRequest("POST", link5, nil))
			switch rec.Code {
			case 202:
				ok.Add(1)
			case 404:
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || refused.Load() != 7 {
		t.Fatalf("8 uses of one link: %d confirmed, %d refused", ok.Load(), refused.Load())
	}

	// No token reaches the log; the link's requests are logged by their route.
	logs := b.logs.String()
	for _, tok := range []string{token, tok2, link5[strings.LastIndex(link5, "/")+1:]} {
		if strings.Contains(logs, tok) {
			t.Fatal("a confirmation token was logged")
		}
	}
	if !strings.Contains(logs, `"path":"`+confirmLinkRoute+`"`) {
		t.Fatal("the link's requests are not logged by their route")
	}
}

// TestConfirmLinkWithoutPublicURL: without a public URL the link is a path.
func TestConfirmLinkWithoutPublicURL(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, ImportConfirmAbove: 1})
	_, imp := b.do(t, "POST", "/imports", importBody(2, 0))
	if code, _ := b.post(t, linkPath(t, imp, "")); code != 202 {
		t.Fatalf("the link = %d", code)
	}
}

// fetchesAtOnce is a stand-in fetch: it stores a result and completes, as the worker does.
func fetchesAtOnce(pool *pgxpool.Pool) fetchFunc {
	return func(ctx context.Context, task tasks.FetchBookmark, run *venturi.Run[tasks.FetchCarry], _ struct{}) (venturi.Outcome, error) {
		var out venturi.Outcome
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE bookmark SET fetch_status = 'fetched', page_title = 'Fetched', fetch_attempts = 1,
				http_status = 200, fetched_at = now() WHERE id = $1`, uuidOf(ulid.MustParseStrict(task.BookmarkID))); err != nil {
				return err
			}
			var err error
			out, err = run.CompleteTx(ctx, tx, venturi.CompletedWith("fetched"))
			return err
		})
		return out, err
	}
}

func TestCreateBookmarkWaits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Bad waits: 400, and nothing is created.
	for _, w := range []string{"5", "-1s", "9s", "1h", "soon", "5s5", strings.Repeat("1", 40) + "ns"} {
		code, got := b.do(t, "POST", "/bookmarks?wait="+w, `{"url":"https://example.com/"}`)
		if p := got["error"].(map[string]any); code != 400 || p["fields"].(map[string]any)["wait"] == nil {
			t.Fatalf("wait=%s: %d %v", w, code, got)
		}
	}
	if _, list := b.do(t, "GET", "/bookmarks", ""); len(list["items"].([]any)) != 0 {
		t.Fatalf("a refused wait created bookmarks: %v", list)
	}
	// No worker: the wait ends and the bookmark is answered as it is, pending.
	code, bm := b.do(t, "POST", "/bookmarks?wait=200ms", `{"url":"https://example.com/pending"}`)
	if code != 201 || bm["fetch_status"] != "pending" || bm["fetch_job"].(map[string]any)["state"] != "available" {
		t.Fatalf("create with a wait and no worker = %d %v", code, bm)
	}
	// With a worker: the fetched bookmark, its job completed.
	b.startWorker(t, fetchesAtOnce(b.pool), nil)
	code, bm = b.do(t, "POST", "/bookmarks?wait=5s", `{"url":"https://example.com/fetched","tags":["w"]}`)
	if code != 201 || bm["fetch_status"] != "fetched" || bm["page_title"] != "Fetched" || bm["fetch_job"].(map[string]any)["state"] != "completed" {
		t.Fatalf("create with a wait = %d %v", code, bm)
	}
	// wait=0 is no wait.
	if code, _ := b.do(t, "POST", "/bookmarks?wait=0s", `{"url":"https://example.com/nowait"}`); code != 201 {
		t.Fatalf("wait=0s = %d", code)
	}
}

// TestWaitingHoldsNoConnection: requests that wait for their fetch hold no database
// connection: with a pool of two, ten waiting creates leave the API answering others.
func TestWaitingHoldsNoConnection(t *testing.T) {
	t.Parallel()
	b := setupPool(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited}, 2)
	observer, err := pgxpool.NewWithConfig(context.Background(), b.pool.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close()
	const n = 10
	var returned atomic.Int32
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			req := httptest.NewRequest("POST", "/bookmarks?wait=8s", strings.NewReader(`{"url":"https://example.com/`+jsonInt(i)+`"}`))
			req.Header.Set("Content-Type", "application/json")
			codes[i] = b.serve(b.auth(req)).Code
			returned.Add(1)
		})
	}
	eventually(t, "every create waits for its fetch", func() (bool, string) {
		var awaited int
		err := observer.QueryRow(context.Background(), "SELECT count(*) FROM venturi_job WHERE kind = 'fetch_bookmark' AND await_channel IS NOT NULL").Scan(&awaited)
		return err == nil && awaited == n, jsonInt(awaited)
	})
	if code, list := b.do(t, "GET", "/bookmarks?limit=100", ""); code != 200 || len(list["items"].([]any)) != n {
		t.Fatalf("a read while %d creates wait = %d", n, code)
	}
	if r := returned.Load(); r != 0 {
		t.Fatalf("%d waiting creates returned before the read: the test proves nothing", r)
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusCreated {
			t.Fatalf("create %d = %d", i, c)
		}
	}
}

// TestWaitEndsBeforeTheRequestTimeout: a wait longer than the request's time limit allows
// ends early enough to answer.
func TestWaitEndsBeforeTheRequestTimeout(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, RequestTimeout: 1500 * time.Millisecond})
	start := time.Now()
	code, bm := b.do(t, "POST", "/bookmarks?wait=8s", `{"url":"https://example.com/"}`)
	if code != 201 || bm["fetch_status"] != "pending" || time.Since(start) > 5*time.Second {
		t.Fatalf("create = %d %v after %v", code, bm, time.Since(start))
	}
}
