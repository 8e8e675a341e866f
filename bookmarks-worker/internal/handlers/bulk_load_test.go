package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// TestBulkLoadedBookmarksAreFetched: bookmarks inserted from SQL in one statement get
// their fetches from the table's trigger (migration 8), which this worker's handlers decode
// and run as the API's: every bookmark ends fetched by the job it names.
func TestBulkLoadedBookmarksAreFetched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const rows = 600
	// One host per row: the fetches start at most once a second per host (FetchHostRate).
	if _, err := b.pool.Exec(ctx, `INSERT INTO bookmark (url, title)
		SELECT 'https://bulk' || i || '.example/page', 'row ' || i FROM generate_series(1, $1::int) i`, rows); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	eventually(t, "every bulk-loaded bookmark fetched", func() (bool, string) {
		var fetched, completed int
		err := b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE b.fetch_status = 'fetched'),
			count(*) FILTER (WHERE j.state = 'completed' AND j.runs = 1)
			FROM bookmark b JOIN venturi_job_all j ON j.id = b.fetch_job_id`).Scan(&fetched, &completed)
		if err != nil {
			t.Fatal(err)
		}
		return fetched == rows && completed == rows, fmt.Sprintf("%d fetched, %d jobs completed in one run", fetched, completed)
	})
	var titled, jobs int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE page_title = 'T ' || url),
		(SELECT count(*) FROM venturi_job_all WHERE kind = 'fetch_bookmark') FROM bookmark`).Scan(&titled, &jobs); err != nil {
		t.Fatal(err)
	}
	if titled != rows || jobs != rows {
		t.Fatalf("%d bookmarks with their page's title, %d fetch jobs; want %d of each", titled, jobs, rows)
	}
}

// TestSQLFetchesMatchTheGoTask: the fetch the trigger enqueues for a URL is the job
// tasks.FetchBookmark's methods describe: its payload decodes into the task, and the
// partition and slot (the host its politeness applies to) are FetchHost's.
func TestSQLFetchesMatchTheGoTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	urls := []string{
		"https://example.com/a", "https://Example.COM./a?b=1#frag", "http://example.com:8080/",
		"http://example.com:/x", "https://WWW.Example.org", "http://[2001:DB8::1]:443/v6", "http://[::1]/",
		"https://sub.dom-ain.example/p?q=%20x", "https://xn--bcher-kva.example/", "https://bücher.example/",
		"http://127.0.0.1:9/", "https://a_b.example/", "HTTPS://UPPER.EXAMPLE/PATH", "https://example.com?x#y",
		"https://example.com#y/z", "https://host.example.:81/", "https://" + strings.Repeat("long.", 40) + "example/",
	}
	if _, err := b.pool.Exec(ctx, "INSERT INTO bookmark (url) SELECT unnest($1::text[])", urls); err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(ctx, `SELECT j.payload, j.dedup_key, j.queue, j.part, j.slot_key, j.slot_limit, j.events
		FROM bookmark b JOIN venturi_job j ON j.id = b.fetch_job_id`)
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		Payload   []byte
		DedupKey  string
		Queue     string
		Part      string
		SlotKey   string
		SlotLimit int32
		Events    bool
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[job])
	if err != nil || len(jobs) != len(urls) {
		t.Fatalf("%d jobs (%v), want %d", len(jobs), err, len(urls))
	}
	for _, j := range jobs {
		var task tasks.FetchBookmark
		if err := json.Unmarshal(j.Payload, &task); err != nil {
			t.Fatalf("payload %s: %v", j.Payload, err)
		}
		if _, err := ulid.ParseStrict(task.BookmarkID); err != nil {
			t.Errorf("payload %s: bookmark_id: %v", j.Payload, err)
		}
		slot := task.Slot()
		got := []any{j.DedupKey, j.Queue, j.Part, j.SlotKey, int(j.SlotLimit), j.Events}
		want := []any{string(task.DedupKey()), task.Queue(), task.Partition(), slot.Key, slot.Limit, task.StreamEvents()}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: job (key, queue, partition, slot, limit, events) = %v, the Go task's %v", task.URL, got, want)
		}
	}
}

// TestSQLTagRebuildMergesInGo: the tag-index rebuild of a bulk load collides with the
// pending one; RebuildTagIndex merges in Go (a union of tags), so the enqueue waits in
// venturi_deferred_merge until the worker merges it: one rebuild with every tag, and the
// index counts the loaded bookmarks.
func TestSQLTagRebuildMergesInGo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pending, err := b.queue.Enqueue(ctx, tasks.NewRebuildTagIndex("go"), venturi.After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO bookmark (url, tags)
		SELECT 'https://tags' || i || '.example/', ARRAY['db', CASE WHEN i % 2 = 0 THEN 'web' ELSE 'db' END]
		FROM generate_series(1, 10) i`); err != nil {
		t.Fatal(err)
	}
	var waiting string
	if err := b.pool.QueryRow(ctx, "SELECT payload::text FROM venturi_deferred_merge WHERE kind = 'rebuild_tag_index'").Scan(&waiting); err != nil {
		t.Fatalf("the SQL rebuild waits for a Go merge: %v", err)
	}
	b.start(t)
	j := b.waitJob(t, pending.ID, venturi.StateCompleted)
	var p tasks.RebuildTagIndex
	var c tasks.TagIndexCarry
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j.Carry, &c); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Tags, []string{"db", "go", "web"}) || p.Requests != 2 || c.Merged != 1 {
		t.Fatalf("merged rebuild %+v carry %+v (the SQL enqueue was %s), want tags db, go, web from two requests", p, c, waiting)
	}
	if n := count(t, b, "SELECT count(*) FROM venturi_deferred_merge"); n != 0 {
		t.Fatalf("%d enqueues still wait for a merge", n)
	}
	if n := count(t, b, "SELECT count(*) FROM venturi_job_all WHERE kind = 'rebuild_tag_index'"); n != 1 {
		t.Fatalf("%d rebuild jobs, want the one merged", n)
	}
	rows, _ := b.pool.Query(ctx, "SELECT tag || '=' || bookmark_count FROM tag_index ORDER BY tag")
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !reflect.DeepEqual(got, []string{"db=10", "web=5"}) {
		t.Fatalf("tag index = %v (%v)", got, err)
	}
}

// count runs a query that returns one number.
func count(t *testing.T, b *testBundle, query string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
