package migrations

import (
	"context"
	"sync"
	"testing"

	"github.com/venturi-dev/bookmarks/sql/dbtest"
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
