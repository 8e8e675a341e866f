package migrations

import (
	"context"
	"sync"
	"testing"
	"testing/fstest"

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
