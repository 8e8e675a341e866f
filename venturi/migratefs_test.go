package venturi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// TestMigrationStatusFS: before any migration every one is pending; after the first, it
// is applied (with its time) and the second pending; a version the table records that the
// migrations do not have is listed as unknown, in order.
func TestMigrationStatusFS(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := context.Background()
	one := fstest.MapFS{"001_init.up.sql": {Data: []byte(`CREATE TABLE st_thing (id int PRIMARY KEY)`)}}
	two := fstest.MapFS{"001_init.up.sql": one["001_init.up.sql"],
		"002_more.up.sql": {Data: []byte(`ALTER TABLE st_thing ADD COLUMN note text`)}}
	summary := func(fsys fstest.MapFS) string {
		t.Helper()
		st, err := venturi.MigrationStatusFS(ctx, pool, fsys, "st_migration")
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, m := range st {
			s := fmt.Sprintf("%d %s", m.Version, m.Name)
			switch {
			case m.Unknown:
				s += " unknown"
			case m.Applied:
				s += " applied"
			default:
				s += " pending"
			}
			if m.Applied != (m.AppliedAt != nil) {
				t.Errorf("%d: Applied %v with AppliedAt %v", m.Version, m.Applied, m.AppliedAt)
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ", ")
	}
	if got := summary(two); got != "1 001_init pending, 2 002_more pending" {
		t.Fatalf("before: %s", got)
	}
	if _, err := venturi.MigrateFS(ctx, pool, one, "st_migration"); err != nil {
		t.Fatal(err)
	}
	if got := summary(two); got != "1 001_init applied, 2 002_more pending" {
		t.Fatalf("after the first: %s", got)
	}
	if _, err := venturi.MigrateFS(ctx, pool, two, "st_migration"); err != nil {
		t.Fatal(err)
	}
	if got := summary(one); got != "1 001_init applied, 2 002_more unknown" {
		t.Fatalf("an older binary's view: %s", got)
	}
	// venturi's own: everything applied in a migrated schema.
	st, err := venturi.MigrationStatus(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := venturi.Migrations()
	if len(st) != len(all) || !st[len(st)-1].Applied {
		t.Fatalf("MigrationStatus of a migrated schema: %+v", st)
	}
}
