package venturi_test

import (
	"context"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/venturi-dev/venturi"
)

// TestMigrateFSAppliesAServiceSchema: a service migrates its own schema with venturi's
// migrator; versions are recorded in its table, a rerun applies nothing, a bad file name
// is refused before anything runs.
func TestMigrateFSAppliesAServiceSchema(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := context.Background()
	fsys := fstest.MapFS{
		"002_more.up.sql": {Data: []byte(`ALTER TABLE app_thing ADD COLUMN note text`)},
		"001_init.up.sql": {Data: []byte(`CREATE TABLE app_thing (id int PRIMARY KEY)`)},
		"README.md":       {Data: []byte(`not a migration`)},
	}
	applied, err := venturi.MigrateFS(ctx, pool, fsys, "app_migration")
	if err != nil || !slices.Equal(applied, []int{1, 2}) {
		t.Fatalf("MigrateFS = %v, %v; want [1 2]", applied, err)
	}
	if applied, err = venturi.MigrateFS(ctx, pool, fsys, "app_migration"); err != nil || len(applied) != 0 {
		t.Fatalf("second MigrateFS = %v, %v; want nothing", applied, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM app_migration`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("app_migration rows = %d, %v", n, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO app_thing (id, note) VALUES (1, 'x')`); err != nil {
		t.Fatalf("schema not applied: %v", err)
	}
	bad := fstest.MapFS{"x_init.up.sql": {Data: []byte(`CREATE TABLE nope (id int)`)}}
	if _, err := venturi.MigrateFS(ctx, pool, bad, "bad_migration"); err == nil {
		t.Fatal("a migration without a version number was accepted")
	}
}
