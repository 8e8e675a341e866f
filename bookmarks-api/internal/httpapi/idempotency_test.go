package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"
)

// idem is the header map of a request with an Idempotency-Key.
func idem(key string) map[string]string { return map[string]string{HeaderIdempotencyKey: key} }

// TestIdempotencyKeyIsChecked: an Idempotency-Key that is empty, too long, not printable
// ASCII or sent twice is a 400 naming the header, and creates nothing; 255 printable
// characters are accepted.
func TestIdempotencyKeyIsChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, key := range map[string]string{
		"empty": "", "256 bytes": strings.Repeat("k", 256), "non-ASCII": "clé", "a control character": "a\tb", "DEL": "a\x7fb",
	} {
		for _, path := range []string{"/bookmarks", "/imports"} {
			rec := b.request(http.MethodPost, path, `{"url":"https://example.com/","items":[{"url":"https://example.com/"}]}`, idem(key))
			p, _ := decode(t, rec)["error"].(map[string]any)
			if fields, _ := p["fields"].(map[string]any); rec.Code != 400 || fields[HeaderIdempotencyKey] == nil {
				t.Fatalf("%s key on %s = %d %s, want 400 naming the header", name, path, rec.Code, rec.Body.String())
			}
		}
	}
	req := b.auth(httptest.NewRequest(http.MethodPost, "/bookmarks", strings.NewReader(`{"url":"https://example.com/"}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add(HeaderIdempotencyKey, "one")
	req.Header.Add(HeaderIdempotencyKey, "two")
	if rec := b.serve(req); rec.Code != 400 {
		t.Fatalf("two keys = %d %s", rec.Code, rec.Body.String())
	}
	if n := b.count(t, "bookmark") + b.count(t, "bookmark_import"); n != 0 {
		t.Fatalf("refused keys created %d resources", n)
	}
	if rec := b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/"}`, idem("~ "+strings.Repeat("k", 253))); rec.Code != 201 {
		t.Fatalf("a 255-byte key = %d %s", rec.Code, rec.Body.String())
	}
}

// TestIdempotentCreateReplays: a retry with the same key and the same request (encoded
// differently) is answered 200, Idempotent-Replayed: true, with what the first created as
// it is now; the same key with another request or on the other endpoint is 422; keys are
// per API key; the row keeps the API key's ID, never the key.
func TestIdempotentCreateReplays(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, ImportConfirmAbove: 1})
	const k = "create-1"
	first := b.request(http.MethodPost, "/bookmarks", `{"url":"https://Example.com/a#x","title":"A","tags":["t"]}`, idem(k))
	if first.Code != 201 || first.Header().Get(HeaderIdempotentReplayed) != "" {
		t.Fatalf("first create = %d %v", first.Code, first.Header())
	}
	created := decode(t, first)
	// The same request: other key order, spacing, the URL's fragment (dropped anyway).
	again := b.request(http.MethodPost, "/bookmarks?wait=1s", `{ "tags":["t"], "title":" A ", "url":"https://example.com/a" }`, idem(k))
	if again.Code != 200 || again.Header().Get(HeaderIdempotentReplayed) != "true" {
		t.Fatalf("retry = %d %v %s", again.Code, again.Header(), again.Body.String())
	}
	replayed := decode(t, again)
	code, read := b.do(t, http.MethodGet, "/bookmarks/"+created["id"].(string), "")
	if code != 200 || replayed["id"] != created["id"] || mustJSON(replayed) != mustJSON(read) {
		t.Fatalf("the retry answered %s; the first created %s, a read shows %s", mustJSON(replayed), created["id"], mustJSON(read))
	}
	for name, tt := range map[string]struct{ path, body string }{
		"another URL":   {"/bookmarks", `{"url":"https://example.com/b","title":"A","tags":["t"]}`},
		"another title": {"/bookmarks", `{"url":"https://example.com/a","tags":["t"]}`},
		"an import":     {"/imports", `{"items":[{"url":"https://example.com/a","title":"A"}],"tags":["t"]}`},
	} {
		rec := b.request(http.MethodPost, tt.path, tt.body, idem(k))
		p, _ := decode(t, rec)["error"].(map[string]any)
		if fields, _ := p["fields"].(map[string]any); rec.Code != 422 || p["code"] != "idempotency_key_reused" || fields[HeaderIdempotencyKey] == nil {
			t.Fatalf("the key with %s = %d %s, want 422 idempotency_key_reused", name, rec.Code, rec.Body.String())
		}
	}
	// Another API key has keys of its own.
	other := b.newKey(t, "other")
	rec := b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/a","title":"A","tags":["t"]}`,
		map[string]string{HeaderIdempotencyKey: k, "Authorization": "Bearer " + other})
	if rec.Code != 201 || decode(t, rec)["id"] == created["id"] {
		t.Fatalf("the same idempotency key from another API key = %d %s, want a create of its own", rec.Code, rec.Body.String())
	}
	if n := b.count(t, "bookmark"); n != 2 {
		t.Fatalf("%d bookmarks, want 2 (one per API key)", n)
	}
	var stored string
	if err := b.pool.QueryRow(context.Background(), "SELECT string_agg(api_key_id::text || idem_key, ',') FROM idempotency_key").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, "bmk_") {
		t.Fatalf("an API key is stored with the idempotency keys: %s", stored)
	}
	keyID, _ := keyIDOf(b.key)
	var n int
	if err := b.pool.QueryRow(context.Background(), "SELECT count(*) FROM idempotency_key WHERE api_key_id = $1 AND idem_key = $2",
		uuidOf(ulid.MustParseStrict(keyID)), k).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows for the key's ID: %d (%v), want 1", n, err)
	}

	// An import: the retry shows the import (without the link, shown once).
	body := `{"items":[{"url":"https://example.com/1"},{"url":"https://example.com/2"}],"tags":["i"]}`
	rec = b.request(http.MethodPost, "/imports", body, idem("import-1"))
	imp := decode(t, rec)
	if rec.Code != 202 || imp["confirmation"].(map[string]any)["url"] == nil {
		t.Fatalf("import = %d %s", rec.Code, rec.Body.String())
	}
	rec = b.request(http.MethodPost, "/imports", body, idem("import-1"))
	got := decode(t, rec)
	if rec.Code != 200 || rec.Header().Get(HeaderIdempotentReplayed) != "true" || got["id"] != imp["id"] ||
		got["confirmation"].(map[string]any)["url"] != nil {
		t.Fatalf("import retry = %d %s", rec.Code, rec.Body.String())
	}
	if n := b.count(t, "bookmark_import"); n != 1 {
		t.Fatalf("%d imports, want 1", n)
	}

	// The bookmark deleted since: the retry is refused, not a second create.
	if code, _ := b.do(t, http.MethodDelete, "/bookmarks/"+created["id"].(string), ""); code != 204 {
		t.Fatalf("delete = %d", code)
	}
	rec = b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/a","title":"A","tags":["t"]}`, idem(k))
	if rec.Code != 409 || rec.Header().Get(HeaderIdempotentReplayed) != "" {
		t.Fatalf("retry after a delete = %d %v %s", rec.Code, rec.Header(), rec.Body.String())
	}
}

// TestIdempotentDuplicateInFlight: a duplicate sent while the first create is still in its
// transaction waits for it and answers as a retry. The test holds the first create in its
// transaction (a SHARE lock on bookmark blocks its insert, after it claimed the key) until
// the duplicate is seen waiting on the first (pg_blocking_pids), then lets it commit.
func TestIdempotentDuplicateInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	lock, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "LOCK TABLE bookmark IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	var lockPID int
	if err := lock.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&lockPID); err != nil {
		t.Fatal(err)
	}
	const body = `{"url":"https://example.com/once"}`
	recs := make([]*httptest.ResponseRecorder, 2)
	var wg sync.WaitGroup
	send := func(i int) {
		wg.Go(func() { recs[i] = b.request(http.MethodPost, "/bookmarks", body, idem("in-flight")) })
	}
	blockedBy := func(pid int) (int, []int) {
		rows, err := b.pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid)
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		for rows.Next() {
			var p int
			if err := rows.Scan(&p); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, p)
		}
		return len(pids), pids
	}
	send(0)
	var first []int
	eventually(t, "the first create waits on the lock", func() (bool, string) {
		n, pids := blockedBy(lockPID)
		first = pids
		return n == 1, jsonInt(n)
	})
	send(1)
	eventually(t, "the duplicate waits on the first create's transaction", func() (bool, string) {
		n, _ := blockedBy(first[0])
		return n == 1, jsonInt(n)
	})
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if recs[0].Code != 201 || recs[0].Header().Get(HeaderIdempotentReplayed) != "" || recs[1].Code != 200 ||
		recs[1].Header().Get(HeaderIdempotentReplayed) != "true" || decode(t, recs[0])["id"] != decode(t, recs[1])["id"] {
		t.Fatalf("first = %d %v %s, duplicate = %d %v %s; want 201, then 200 replaying the same bookmark",
			recs[0].Code, recs[0].Header(), recs[0].Body.String(), recs[1].Code, recs[1].Header(), recs[1].Body.String())
	}
	if n := b.count(t, "bookmark"); n != 1 {
		t.Fatalf("%d bookmarks, want 1", n)
	}
	if n := b.count(t, "venturi_job WHERE kind = 'fetch_bookmark'"); n != 1 {
		t.Fatalf("%d fetch jobs, want 1", n)
	}
}

// TestIdempotentCreatesAtOnce: many requests with one key at once make one bookmark: one
// 201, the others 200 replays of it.
func TestIdempotentCreatesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 8
	recs := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			recs[i] = b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/race"}`, idem("race"))
		})
	}
	wg.Wait()
	created := 0
	for i, rec := range recs {
		switch {
		case rec.Code == 201:
			created++
		case rec.Code != 200:
			t.Fatalf("request %d = %d %s", i, rec.Code, rec.Body.String())
		}
		if id := decode(t, rec)["id"]; id != decode(t, recs[0])["id"] {
			t.Fatalf("request %d answered bookmark %v, request 0 %v", i, id, decode(t, recs[0])["id"])
		}
	}
	if created != 1 || b.count(t, "bookmark") != 1 {
		t.Fatalf("%d answers 201 and %d bookmarks, want 1 and 1", created, b.count(t, "bookmark"))
	}
}

// TestIdempotencyKeysExpire: an expired key creates again, and each keyed create deletes at
// most expiredKeysPerCreate expired rows, so they go without a job to delete them.
func TestIdempotencyKeysExpire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	first := b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/old"}`, idem("old"))
	if first.Code != 201 {
		t.Fatalf("create = %d", first.Code)
	}
	keyID, _ := keyIDOf(b.key)
	const stale = 15
	for range stale {
		if _, err := b.pool.Exec(ctx, `INSERT INTO idempotency_key (api_key_id, idem_key, endpoint, request_hash, resource_id, expires_at)
			VALUES ($1, $2, 'POST /bookmarks', sha256('x'), gen_random_uuid(), now() - interval '1 hour')`,
			uuidOf(ulid.MustParseStrict(keyID)), ulid.Make().String()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(ctx, "UPDATE idempotency_key SET expires_at = now() - interval '1 second' WHERE idem_key = 'old'"); err != nil {
		t.Fatal(err)
	}
	expired := func() int { return b.count(t, "idempotency_key WHERE expires_at <= now()") }
	if n := expired(); n != stale+1 {
		t.Fatalf("%d expired keys, want %d", n, stale+1)
	}
	// The expired key creates anew, another body or not.
	again := b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/new"}`, idem("old"))
	if again.Code != 201 || decode(t, again)["id"] == decode(t, first)["id"] {
		t.Fatalf("an expired key = %d %s, want a new bookmark", again.Code, again.Body.String())
	}
	// It deleted the 10 oldest expired rows and made "old" live again.
	if n := expired(); n != stale-expiredKeysPerCreate {
		t.Fatalf("%d expired keys after one keyed create, want %d", n, stale-expiredKeysPerCreate)
	}
	if rec := b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/plain"}`, nil); rec.Code != 201 {
		t.Fatalf("create without a key = %d", rec.Code)
	}
	if rec := b.request(http.MethodPost, "/imports", `{"items":[{"url":"https://example.com/"}]}`, idem("next")); rec.Code != 202 {
		t.Fatalf("keyed import = %d", rec.Code)
	}
	if n := expired(); n != 0 {
		t.Fatalf("%d expired keys left after two keyed creates", n)
	}
	if n := b.count(t, "idempotency_key"); n != 2 {
		t.Fatalf("%d idempotency keys, want the two live ones", n)
	}
}
