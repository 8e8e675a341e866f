package migrations

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/bookmarks/sql/dbtest"
	"github.com/venturi-dev/venturi"
)

func TestMigrateIsIdempotentAndConcurrencySafe(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t, "bm", 0)

	all, err := All()
	if err != nil || len(all) == 0 {
		t.Fatalf("All() = %v, %v", all, err)
	}
	var wg sync.WaitGroup
	results := make([]Result, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = Migrate(ctx, pool) })
	}
	wg.Wait()
	applied := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
		applied += len(results[i].App)
	}
	if applied != len(all) {
		t.Fatalf("app migrations applied %d times in total, want %d (each exactly once)", applied, len(all))
	}
	res, err := Migrate(ctx, pool)
	if err != nil || len(res.App) != 0 || len(res.Venturi) != 0 {
		t.Fatalf("second Migrate = %+v, %v; want nothing applied", res, err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM bookmark").Scan(&n); err != nil {
		t.Fatalf("bookmark table missing: %v", err)
	}
}

// TestFetchErrorsBecomeCodes: migration 3 rewrites the raw errors versions 1 and 2 stored on
// bookmarks (with the resolver's and dialled addresses in them) as reason codes, and the
// table refuses a message from then on.
func TestFetchErrorsBecomeCodes(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t, "bm2", 0)
	v1, err := files.ReadFile("001_bookmarks.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	v2, err := files.ReadFile("002_api_keys.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := venturi.MigrateFS(ctx, pool, fstest.MapFS{"001_bookmarks.up.sql": {Data: v1}, "002_api_keys.up.sql": {Data: v2}}, "bookmarks_migration"); err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{ // version 1's message -> the code it becomes
		"no_such_host: lookup nohost.example on 10.255.255.53:53: no such host":                         "dns",
		"network_error: Get \"http://127.0.0.1:1/\": dial tcp 127.0.0.1:1: connect: connection refused": "network",
		"blocked: prohibited IP address: 10.0.0.1 is not a permitted destination":                       "blocked_address",
		"gone (HTTP 410)":              "http_status",
		"http_server_error (HTTP 503)": "http_status",
		"rate_limited (HTTP 429)":      "http_status",
		"body_too_large (HTTP 200): body larger than 5242880 bytes":       "too_large",
		"unsupported_content_type (HTTP 200): content type \"image/png\"": "bad_content",
		"timeout: context deadline exceeded":                              "timeout",
		"bad_url: no host":                                                "bad_url",
		"":                                                                "",
	}
	for msg := range stored {
		if _, err := pool.Exec(ctx, "INSERT INTO bookmark (id, url, fetch_error) VALUES (gen_random_uuid(), $1, $1)", msg); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Migrate(ctx, pool)
	if err != nil || len(res.App) == 0 || res.App[0] != 3 {
		t.Fatalf("Migrate = %+v, %v; want version 3 applied (and those after it)", res, err)
	}
	for msg, code := range stored {
		var got string
		if err := pool.QueryRow(ctx, "SELECT fetch_error FROM bookmark WHERE url = $1", msg).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != code {
			t.Errorf("%q became %q, want %q", msg, got, code)
		}
	}
	if _, err := pool.Exec(ctx, "UPDATE bookmark SET fetch_error = 'dns: lookup x on 10.0.0.2:53'"); err == nil {
		t.Fatal("a raw error was stored in fetch_error")
	}
}

// TestIdempotencyKeysUpgrade: migration 6 applies to a version 5 database with data in it
// (an API key, a bookmark, an import); the rows stay as they were, and the new table takes
// idempotency keys of the keys that existed before, refuses malformed ones, and loses a
// key's rows when the key is deleted.
func TestIdempotencyKeysUpgrade(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t, "bm6", 0)
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	v5 := fstest.MapFS{}
	for _, name := range []string{"001_bookmarks.up.sql", "002_api_keys.up.sql", "003_fetch_error_codes.up.sql",
		"004_import_confirmation.up.sql", "005_api_key_ops.up.sql"} {
		data, err := files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		v5[name] = &fstest.MapFile{Data: data}
	}
	if _, err := venturi.MigrateFS(ctx, pool, v5, "bookmarks_migration"); err != nil {
		t.Fatal(err)
	}
	const key, bookmark, imp = "01890000-0000-7000-8000-000000000001", "01890000-0000-7000-8000-000000000002", "01890000-0000-7000-8000-000000000003"
	for _, q := range []string{
		"INSERT INTO api_key (id, name, key_hash, ops) VALUES ('" + key + "', 'old', sha256('k'), 'read')",
		"INSERT INTO bookmark (id, url, title) VALUES ('" + bookmark + "', 'https://example.com/', 'kept')",
		"INSERT INTO bookmark_import (id, job_id, total) VALUES ('" + imp + "', gen_random_uuid(), 1)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Migrate(ctx, pool)
	if err != nil || len(res.App) == 0 || res.App[0] != 6 {
		t.Fatalf("Migrate = %+v, %v; want version 6 applied (and those after it)", res, err)
	}
	var title, name string
	if err := pool.QueryRow(ctx, "SELECT b.title, k.name FROM bookmark b, api_key k WHERE b.id = $1 AND k.id = $2", bookmark, key).
		Scan(&title, &name); err != nil || title != "kept" || name != "old" {
		t.Fatalf("rows after the upgrade: %q %q (%v)", title, name, err)
	}
	insert := func(apiKey, idemKey, endpoint string) error {
		_, err := pool.Exec(ctx, `INSERT INTO idempotency_key (api_key_id, idem_key, endpoint, request_hash, resource_id, expires_at)
			VALUES ($1, $2, $3, sha256('body'), $4, now() + interval '1 day')`, apiKey, idemKey, endpoint, bookmark)
		return err
	}
	if err := insert(key, "retry-1", "POST /bookmarks"); err != nil {
		t.Fatalf("an idempotency key of a key made before the upgrade: %v", err)
	}
	for what, err := range map[string]error{
		"a duplicate":        insert(key, "retry-1", "POST /imports"),
		"an empty key":       insert(key, "", "POST /bookmarks"),
		"a 256-byte key":     insert(key, strings.Repeat("k", 256), "POST /bookmarks"),
		"another endpoint":   insert(key, "retry-2", "DELETE /bookmarks"),
		"an unknown API key": insert("01890000-0000-7000-8000-0000000000ff", "retry-3", "POST /bookmarks"),
	} {
		if err == nil {
			t.Errorf("%s was stored", what)
		}
	}
	if _, err := pool.Exec(ctx, "DELETE FROM api_key WHERE id = $1", key); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM idempotency_key").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d idempotency keys left after their API key was deleted (%v)", n, err)
	}
}

// migrateTo applies venturi's migrations and the app's up to version last (included) to
// pool's schema.
func migrateTo(t *testing.T, pool *pgxpool.Pool, last int) {
	t.Helper()
	ctx := context.Background()
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	older := fstest.MapFS{}
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries { // in name order, which is version order
		if i >= last {
			break
		}
		data, err := files.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		older[e.Name()] = &fstest.MapFile{Data: data}
	}
	if len(older) != last || len(all) <= last {
		t.Fatalf("%d of %d migrations up to version %d", len(older), len(all), last)
	}
	if _, err := venturi.MigrateFS(ctx, pool, older, "bookmarks_migration"); err != nil {
		t.Fatal(err)
	}
}

// TestImportWorkflowsUpgrade: migration 7 applies to a version 6 database with an import
// in it; the import keeps its rows and has no workflow (it is an import of the old kind,
// which the worker still runs as a job of its own). The summary table takes a summary
// whose counts add up, refuses one whose do not (or that is malformed), holds one summary
// per import, and loses it with its import.
func TestImportWorkflowsUpgrade(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(t, "bm7", 0)
	migrateTo(t, pool, 6)
	const imp, bookmark = "01890000-0000-7000-8000-000000000003", "01890000-0000-7000-8000-000000000004"
	for _, q := range []string{
		"INSERT INTO bookmark_import (id, job_id, total, imported, status) VALUES ('" + imp + "', gen_random_uuid(), 2, 1, 'done')",
		"INSERT INTO bookmark (id, url, import_id) VALUES ('" + bookmark + "', 'https://example.com/', '" + imp + "')",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Migrate(ctx, pool)
	if err != nil || len(res.App) == 0 || res.App[0] != 7 {
		t.Fatalf("Migrate = %+v, %v; want version 7 applied", res, err)
	}
	var imported int
	var workflow pgtype.UUID
	if err := pool.QueryRow(ctx, "SELECT imported, workflow_id FROM bookmark_import WHERE id = $1", imp).Scan(&imported, &workflow); err != nil ||
		imported != 1 || workflow.Valid {
		t.Fatalf("the import after the upgrade: %d imported, workflow %v (%v)", imported, workflow, err)
	}
	summary := func(fetches, fetched, titles, failed, gaveUp, superseded int, failures, tagIndex string) error {
		_, err := pool.Exec(ctx, `INSERT INTO bookmark_import_summary
			(import_id, fetches, fetched, titles_found, failed, failures, gave_up, superseded, tag_index)
			VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9)`, imp, fetches, fetched, titles, failed, failures, gaveUp, superseded, tagIndex)
		return err
	}
	for what, err := range map[string]error{
		"counts that do not add up":      summary(3, 1, 0, 1, 0, 0, `{"dns":1}`, "rebuilt"),
		"more titles than pages fetched": summary(2, 1, 2, 1, 0, 0, `{"dns":1}`, "rebuilt"),
		"a negative count":               summary(0, 1, 0, 0, -1, 0, `{}`, "rebuilt"),
		"failures that are not a map":    summary(2, 1, 0, 1, 0, 0, `["dns"]`, "rebuilt"),
		"an unknown tag index outcome":   summary(2, 1, 0, 1, 0, 0, `{"dns":1}`, "maybe"),
	} {
		if err == nil {
			t.Errorf("%s was stored", what)
		}
	}
	if err := summary(4, 1, 1, 1, 1, 1, `{"dns":1}`, "rebuilt"); err != nil {
		t.Fatalf("a summary: %v", err)
	}
	if err := summary(4, 1, 1, 1, 1, 1, `{"dns":1}`, "rebuilt"); err == nil {
		t.Fatal("a second summary of one import was stored")
	}
	if _, err := pool.Exec(ctx, "DELETE FROM bookmark WHERE import_id = $1", imp); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM bookmark_import WHERE id = $1", imp); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM bookmark_import_summary").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d summaries left after their import was deleted (%v)", n, err)
	}
}
