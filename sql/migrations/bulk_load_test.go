package migrations

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/bookmarks/sql/dbtest"
)

// bulkPool is a migrated schema of its own and its URL.
func bulkPool(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	u := dbtest.SchemaURL(t, "bmbulk")
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool, u
}

// count runs a query that returns one number.
func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// checkFetchJobs fails unless every bookmark has exactly one fetch job, the one its
// fetch_job_id names, written as tasks.FetchBookmark's enqueue writes it.
func checkFetchJobs(t *testing.T, pool *pgxpool.Pool, want int) {
	t.Helper()
	if n := count(t, pool, "SELECT count(*) FROM venturi_job WHERE kind = 'fetch_bookmark'"); n != want {
		t.Fatalf("%d fetch jobs, want %d", n, want)
	}
	if n := count(t, pool, `SELECT count(*) FROM (SELECT payload->>'bookmark_id' FROM venturi_job
		WHERE kind = 'fetch_bookmark' GROUP BY 1 HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d bookmarks have more than one fetch job", n)
	}
	// The shape of tasks.FetchBookmark{BookmarkID, URL}: queue, key, host's partition and
	// slot, events, meta; bookmarks_test.go in bookmarks-worker runs them.
	if n := count(t, pool, `SELECT count(*) FROM bookmark b JOIN venturi_job j ON j.id = b.fetch_job_id
		WHERE j.kind = 'fetch_bookmark' AND j.queue = 'default' AND j.priority = 0
		  AND j.payload = jsonb_build_object('bookmark_id', venturi_ulid_text(b.id), 'url', b.url)
		  AND j.dedup_key = 'bookmark/' || venturi_ulid_text(b.id)
		  AND j.part = bookmark_url_host(b.url) AND j.slot_key = 'host:' || bookmark_url_host(b.url)
		  AND j.slot_limit = 2 AND j.slot_policy = 0 AND j.events
		  AND j.meta = jsonb_build_object('bookmark', venturi_ulid_text(b.id))
		  AND j.state = 'available'`); n != want {
		t.Fatalf("%d bookmarks point at their fetch job as the Go enqueue writes it, want %d", n, want)
	}
}

func TestBulkInsertEnqueuesOneFetchPerRow(t *testing.T) {
	ctx := context.Background()
	pool, _ := bulkPool(t)
	const rows = 3000
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO bookmark (url, title, tags)
			SELECT 'https://h' || (i % 40) || '.example/p/' || i, 'row ' || i, ARRAY['t' || (i % 3), 'bulk']
			FROM generate_series(1, $1::int) i`, rows)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checkFetchJobs(t, pool, rows)
	var payload string
	if err := pool.QueryRow(ctx, `SELECT payload::text FROM venturi_job WHERE kind = 'rebuild_tag_index'
		AND dedup_key = 'tag-index' AND state = 'scheduled'`).Scan(&payload); err != nil {
		t.Fatalf("one tag-index rebuild: %v", err)
	}
	if want := `{"tags": ["bulk", "t0", "t1", "t2"], "quiet_ms": 2000, "requests": 1}`; payload != want {
		t.Fatalf("rebuild payload %s, want %s", payload, want)
	}
}

func TestRolledBackBulkInsertEnqueuesNothing(t *testing.T) {
	ctx := context.Background()
	pool, _ := bulkPool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO bookmark (url, tags)
		SELECT 'https://rb.example/' || i, '{rb}' FROM generate_series(1, 500) i`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "SELECT count(*) FROM venturi_job") + count(t, pool, "SELECT count(*) FROM bookmark"); n != 0 {
		t.Fatalf("%d jobs and bookmarks after the rollback, want none", n)
	}
}

// TestBulkInsertRefusesAnUnfetchableURL: one bad URL fails the statement with an error
// naming the row and the problem; nothing of the statement is inserted or enqueued.
func TestBulkInsertRefusesAnUnfetchableURL(t *testing.T) {
	ctx := context.Background()
	pool, _ := bulkPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO bookmark (url) VALUES ('https://ok.example/'), ('ftp://files.example/x'),
		('https://user:secret@creds.example/')`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" || pe.ColumnName != "url" || pe.TableName != "bookmark" ||
		!strings.Contains(pe.Message, "url ftp://files.example/x: must be an absolute http or https URL") ||
		!strings.HasPrefix(pe.Detail, "2 row(s)") || !strings.Contains(pe.Hint, "bookmark_url_problem") {
		t.Fatalf("err = %#v, want check_violation naming the first bad row", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM venturi_job") + count(t, pool, "SELECT count(*) FROM bookmark"); n != 0 {
		t.Fatalf("%d jobs and bookmarks after the refusal, want none", n)
	}
	for u, want := range map[string]string{
		"https://Example.COM./a?b#c":         "",
		"http://[2001:db8::1]:8080/x":        "",
		"http://x.example:/":                 "",
		"http://x.example:0080/":             "",
		"":                                   "is required",
		"https://a.example/two words":        "must not contain whitespace or control characters",
		"mailto:someone@example.com":         "must be an absolute http or https URL",
		"http://x.example@y.example/":        "must not contain credentials",
		"http://x.example:0/":                "must have a port from 1 to 65535",
		"http://x.example:65536/":            "must have a port from 1 to 65535",
		"http:///path":                       "must have a host",
		"http://ex%41mple.com/":              "must have a host of letters, digits",
		"http://[fe80::1%25eth0]/":           "must have a host of letters, digits",
		"http://" + strings.Repeat("a", 251): "must have a host of at most 250 bytes",
	} {
		var got string
		if err := pool.QueryRow(ctx, "SELECT coalesce(bookmark_url_problem($1), '')", u).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got, want) || (want == "") != (got == "") {
			t.Errorf("bookmark_url_problem(%q) = %q, want %q", u, got, want)
		}
	}
}

// TestInsertsThatCarryTheirJobAreLeftAlone: the API's and the import worker's inserts (a
// fetch_job_id, or an import_id for an import's workflow) and rows loaded as results get
// no job from the trigger.
func TestInsertsThatCarryTheirJobAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	pool, _ := bulkPool(t)
	if _, err := pool.Exec(ctx, `INSERT INTO bookmark (url, tags, fetch_job_id) VALUES ('https://api.example/', '{api}', venturi_ulid_make());
		INSERT INTO bookmark (url, tags, import_id) VALUES ('https://import.example/', '{imp}', venturi_ulid_make());
		INSERT INTO bookmark (url, tags, fetch_status) VALUES ('https://done.example/', '{done}', 'fetched'), ('bad url', '{}', 'failed')`); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "SELECT count(*) FROM venturi_job"); n != 0 {
		t.Fatalf("%d jobs, want none", n)
	}
}

// TestPsqlCopyEnqueuesFetches runs the psql commands of bookmarks-worker/README.md's "Bulk
// loads from SQL": a \copy into bookmark, and a load in batches from a staging table that
// leaves out (and lists) the URLs bookmark_url_problem refuses.
func TestPsqlCopyEnqueuesFetches(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql is not in PATH: %v", err)
	}
	pool, u := bulkPool(t)
	dir := t.TempDir()
	var copyRows, stagingRows strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&copyRows, "https://c%d.example/page/%d\tcopied %d\t{copy,c%d}\n", i%25, i, i, i%2)
	}
	for i := range 2500 {
		fmt.Fprintf(&stagingRows, "https://s%d.example/%d\tstaged\t{staged}\n", i%10, i)
	}
	stagingRows.WriteString("ftp://old.example/file\tunfetchable\t{staged}\n")
	for name, rows := range map[string]string{"copy.tsv": copyRows.String(), "staging.tsv": stagingRows.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(rows), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := `\set ON_ERROR_STOP on
\copy bookmark (url, title, tags) FROM 'copy.tsv'
CREATE TEMP TABLE staging (url text, title text, tags text[]);
\copy staging FROM 'staging.tsv'
SELECT url, bookmark_url_problem(url) AS problem FROM staging WHERE bookmark_url_problem(url) IS NOT NULL;
ALTER TABLE staging ADD COLUMN n bigserial;
DO $$
DECLARE
    batch CONSTANT integer := 1000;
    last  bigint := (SELECT max(n) FROM staging);
BEGIN
    FOR lo IN 0 .. last BY batch LOOP
        INSERT INTO bookmark (url, title, tags)
        SELECT url, title, tags FROM staging
        WHERE n > lo AND n <= lo + batch AND bookmark_url_problem(url) IS NULL;
        COMMIT;
    END LOOP;
END $$;
`
	if err := os.WriteFile(filepath.Join(dir, "load.sql"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(psql, "-X", "-q", "-A", "-t", "-f", "load.sql", psqlURL(t, u))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+searchPath(t, u))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "ftp://old.example/file|must be an absolute http or https URL" {
		t.Fatalf("psql listed %q, want the one refused URL", got)
	}
	checkFetchJobs(t, pool, 4500)
	if n := count(t, pool, "SELECT count(*) FROM bookmark WHERE url LIKE 'ftp:%'"); n != 0 {
		t.Fatalf("the refused URL was loaded")
	}
}

// searchPath is the search_path of a dbtest URL.
func searchPath(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("search_path")
}

// psqlURL is a dbtest URL without its search_path, which libpq does not take in a URL.
func psqlURL(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String()
}
