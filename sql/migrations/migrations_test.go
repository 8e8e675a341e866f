package migrations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMigrateIsIdempotentAndConcurrencySafe(t *testing.T) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		t.Fatal("TEST_DATABASE_URL is not set: run through `scripts/pg.sh with -- go test ./...` or `make test/app`")
	}
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "bm_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	cfg, _ := pgxpool.ParseConfig(url)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

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
