package venturi

import (
	"context"
	"fmt"
	"testing"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// TestClaimLocksOnlyTheRowsItTakes: with 1,000 available jobs spread over 100 kinds, a
// claim of 10 (its transaction still open) locks exactly the 10 rows it returns, the most
// urgent ones across all kinds: every other available job can still be locked by another
// transaction. The per-kind claim of schema 3 locked up to 10 rows per kind here (1,000).
func TestClaimLocksOnlyTheRowsItTakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.Schema(t), 4)
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, 100)
	for i := range kinds {
		kinds[i] = fmt.Sprintf("k%03d", i)
	}
	// Priority 5 for the first job of every tenth kind: those ten must be the ones claimed.
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, priority, payload, run_at)
		SELECT gen_random_uuid(), 'k' || lpad((g % 100)::text, 3, '0'), 'available',
		       CASE WHEN g < 100 AND g % 10 = 0 THEN 5 ELSE 0 END, '{}', now() - interval '1 second' * g
		FROM generate_series(0, 999) g`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := dbsqlc.New().Claim(ctx, tx, dbsqlc.ClaimParams{
		LeaseUs: 30_000_000, WorkerID: "t", Queue: DefaultQueue, Kinds: kinds, Max: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 10 {
		t.Fatalf("claimed %d rows, want 10", len(rows))
	}
	for _, r := range rows {
		var prio int
		if err := tx.QueryRow(ctx, "SELECT priority FROM venturi_job WHERE id = $1", r.ID).Scan(&prio); err != nil || prio != 5 {
			t.Fatalf("claimed %s of priority %d (%v), want only the priority-5 jobs", r.Kind, prio, err)
		}
	}
	var lockable int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM venturi_job
		WHERE state = 'available' FOR UPDATE SKIP LOCKED) s`).Scan(&lockable); err != nil {
		t.Fatal(err)
	}
	if lockable != 990 {
		t.Fatalf("%d of the 990 unclaimed jobs can be locked; the claim holds %d rows it did not take", lockable, 990-lockable)
	}
}
