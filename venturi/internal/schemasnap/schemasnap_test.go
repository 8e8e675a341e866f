package schemasnap_test

import (
	"context"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/schemasnap"
	"github.com/venturi-dev/venturi/internal/testdb"
)

var update = flag.Bool("update", false, "rewrite the committed snapshot (venturi/schema) from the migrations")

// committedDir is the committed snapshot, venturi/schema, from this package's directory.
const committedDir = "../../schema"

// take migrates a fresh schema with the migrations in fsys, as venturi.Migrate applies
// them, and returns its snapshot.
func take(t *testing.T, fsys fstest.MapFS) schemasnap.Snapshot {
	t.Helper()
	ctx := context.Background()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema, 2)
	if fsys == nil {
		if _, err := venturi.Migrate(ctx, pool); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	} else if _, err := venturi.MigrateFS(ctx, pool, fsys, "venturi_migration"); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	snap, err := schemasnap.Take(ctx, pool, schema)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap
}

// committed reads the committed snapshot.
func committed(t *testing.T) schemasnap.Snapshot {
	t.Helper()
	snap, err := schemasnap.Read(os.DirFS(committedDir))
	if err != nil {
		t.Fatalf("read the committed snapshot: %v", err)
	}
	return snap
}

// report is the differences as the golden test prints them.
func report(diffs []schemasnap.Difference) string {
	var b strings.Builder
	for _, d := range diffs {
		b.WriteString(d.String())
		b.WriteString("\n")
	}
	return b.String()
}

// TestSnapshotIsUpToDate: the committed snapshot in venturi/schema is what venturi's
// migrations make of a fresh schema. With -update it rewrites the snapshot instead.
func TestSnapshotIsUpToDate(t *testing.T) {
	generated := take(t, nil)
	if *update {
		if err := schemasnap.Write(committedDir, generated); err != nil {
			t.Fatalf("write the snapshot: %v", err)
		}
		t.Logf("wrote %d files to venturi/schema", len(generated))
	}
	if diffs := schemasnap.Compare(committed(t), generated); len(diffs) > 0 {
		t.Fatalf("venturi/schema is not what the migrations make (%d files differ). A schema change is a new migration "+
			"(migration/NNN_name.up.sql), and its snapshot is regenerated in the same commit: run `make generate` at the "+
			"repository root, or in venturi/ `%s`, and review the snapshot's diff. (A diff of tables.sql's "+
			"\"As PostgreSQL N prints\" line means this server's major version is not the one the snapshot was made "+
			"with: its other differences may be only the server's printing.)\n\n%s",
			len(diffs), schemasnap.RegenerateCommand, report(diffs))
	}
}

// TestSnapshotNamesTheFilesAnExtraMigrationChanges: a migration after venturi's own that
// adds a column, replaces a function's body and adds a function makes a snapshot that
// differs from the committed one in exactly those files: tables.sql and the two
// functions' files.
func TestSnapshotNamesTheFilesAnExtraMigrationChanges(t *testing.T) {
	t.Parallel()
	all, err := venturi.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{}
	for _, m := range all {
		fsys[m.Name+".up.sql"] = &fstest.MapFile{Data: []byte(m.SQL)}
	}
	fsys["999_snapshot_drift.up.sql"] = &fstest.MapFile{Data: []byte(`
		ALTER TABLE venturi_kind ADD COLUMN drift_probe integer;
		CREATE OR REPLACE FUNCTION venturi_events_channel() RETURNS text LANGUAGE sql STABLE
		AS $$ SELECT 'venturi_drift_' || md5(current_schema()) $$;
		CREATE FUNCTION venturi_drift_probe() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;`)}
	diffs := schemasnap.Compare(committed(t), take(t, fsys))
	var got []string
	for _, d := range diffs {
		got = append(got, d.Path+" "+string(d.Change))
	}
	want := []string{
		"functions/venturi_drift_probe.sql missing",
		"functions/venturi_events_channel.sql changed",
		"tables.sql changed",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("differences %q, want %q:\n%s", got, want, report(diffs))
	}
	for _, d := range diffs {
		if d.Path == "tables.sql" && !strings.Contains(d.Diff, "+    drift_probe") {
			t.Errorf("tables.sql's diff does not add the column:\n%s", d.Diff)
		}
		if d.Path == "functions/venturi_events_channel.sql" &&
			(!strings.Contains(d.Diff, "+AS $function$ SELECT 'venturi_drift_'") || !strings.Contains(d.Diff, "-AS $function$ SELECT 'venturi_events_'")) {
			t.Errorf("the function's diff does not show its new body replacing the old:\n%s", d.Diff)
		}
	}
	if r := report(diffs); !strings.Contains(r, "functions/venturi_events_channel.sql: differs") {
		t.Errorf("the report does not name the changed function's file:\n%s", r)
	}
}

// TestCompareReportsExtraAndMissingFiles: a committed file the migrations no longer make
// (a dropped function's) is extra, a generated one not committed is missing, and their
// diffs are the whole files.
func TestCompareReportsExtraAndMissingFiles(t *testing.T) {
	t.Parallel()
	committed := schemasnap.Snapshot{"tables.sql": "a\n", "functions/gone.sql": "old\nbody\n"}
	generated := schemasnap.Snapshot{"tables.sql": "a\n", "functions/new.sql": "new\n"}
	diffs := schemasnap.Compare(committed, generated)
	if len(diffs) != 2 || diffs[0].Path != "functions/gone.sql" || diffs[0].Change != schemasnap.Extra ||
		diffs[1].Path != "functions/new.sql" || diffs[1].Change != schemasnap.Missing {
		t.Fatalf("Compare = %+v", diffs)
	}
	if !strings.Contains(diffs[0].Diff, "-old\n-body\n") || !strings.Contains(diffs[1].Diff, "+new\n") {
		t.Fatalf("diffs:\n%s%s", diffs[0].Diff, diffs[1].Diff)
	}
}

// TestCompareDiffShowsContext: a changed line comes with the lines around it and the line
// numbers of its hunk.
func TestCompareDiffShowsContext(t *testing.T) {
	t.Parallel()
	a := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"
	b := "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n"
	diffs := schemasnap.Compare(schemasnap.Snapshot{"f.sql": a}, schemasnap.Snapshot{"f.sql": b})
	want := "--- committed/f.sql\n+++ generated/f.sql\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
	if len(diffs) != 1 || diffs[0].Diff != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", diffs[0].Diff, want)
	}
}
