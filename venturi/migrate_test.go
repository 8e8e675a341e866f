package venturi_test

import (
	"context"
	"io/fs"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

func TestMigrateConcurrentlyOnFreshSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	all, err := venturi.Migrations()
	if err != nil || len(all) == 0 {
		t.Fatalf("Migrations() = %v, %v", all, err)
	}
	var versions []int
	for i, m := range all {
		if i > 0 && m.Version <= all[i-1].Version {
			t.Fatalf("migrations out of order: %+v", all)
		}
		if m.SQL == "" || m.Name == "" {
			t.Fatalf("empty migration %+v", m)
		}
		versions = append(versions, m.Version)
	}
	// Two "replicas", each with its own pool, start together.
	pools := []*pgxpool.Pool{testdb.Pool(t, schema, 4), testdb.Pool(t, schema, 4)}
	applied := make([][]int, len(pools))
	errs := make([]error, len(pools))
	concurrently(len(pools), func(i int) { applied[i], errs[i] = venturi.Migrate(ctx, pools[i]) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
	}
	// Each version was applied by exactly one of them.
	got := slices.Concat(applied[0], applied[1])
	slices.Sort(got)
	if !slices.Equal(got, versions) {
		t.Fatalf("applied %v and %v, want each of %v exactly once", applied[0], applied[1], versions)
	}
	pool := pools[0]
	rows, err := pool.Query(ctx, `SELECT version, count(*) FROM venturi_migration GROUP BY version ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []int
	for rows.Next() {
		var v, n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("version %d recorded %d times", v, n)
		}
		recorded = append(recorded, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(recorded, versions) {
		t.Fatalf("venturi_migration holds %v, want %v", recorded, versions)
	}
	// A later Migrate has nothing to do, and the schema works.
	again, err := venturi.Migrate(ctx, pool)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate applied %v, %v", again, err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	r := enqueue(t, q, plainTask{N: 1})
	jobByID(t, q, r.ID)
	// The tables went into the pool's schema, not public.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = $1 AND table_name IN ('venturi_job', 'venturi_migration')`, schema).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d venturi tables in schema %s (%v)", n, schema, err)
	}
}

func TestMigrationsFSMatchesMigrations(t *testing.T) {
	t.Parallel()
	all, err := venturi.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		b, err := fs.ReadFile(venturi.MigrationsFS(), m.Name+".up.sql")
		if err != nil || string(b) != m.SQL {
			t.Fatalf("MigrationsFS %s.up.sql: %v", m.Name, err)
		}
	}
}
