package httpapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestTagEditsDebounceAndRefetchesThrottle: a burst of bookmarks with tags merges into one
// tag-index rebuild whose due time each merge pushes to TagIndexDelay from now (debounce,
// read from the merged journal entries: database times); a burst of refetches keeps the
// first refetch's due time (throttle).
func TestTagEditsDebounceAndRefetchesThrottle(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, TagIndexDelay: delay, RefetchDelay: time.Hour})
	ctx := context.Background()
	q := venturi.NewQueue(b.pool, venturi.QueueConfig{})
	var bookmark string
	for i := range 4 {
		code, bm := b.do(t, "POST", "/bookmarks", fmt.Sprintf(`{"url":"https://example.com/%d","tags":["t%d"]}`, i, i))
		if code != 201 {
			t.Fatalf("create = %d %v", code, bm)
		}
		bookmark = bm["id"].(string)
	}
	var raw pgtype.UUID
	var rebuilds int
	if err := b.pool.QueryRow(ctx, `SELECT max(id::text)::uuid, count(*) FROM venturi_job WHERE kind = 'rebuild_tag_index'`).Scan(&raw, &rebuilds); err != nil || rebuilds != 1 {
		t.Fatalf("%d rebuild jobs (%v), want 1", rebuilds, err)
	}
	id := ulid.ULID(raw.Bytes)
	j, err := q.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Journal) != 3 {
		t.Fatalf("rebuild journal %+v, want 3 merges", j.Journal)
	}
	for _, e := range j.Journal {
		if e.Due != "debounce" || !e.DueAfter.Equal(e.At.Add(delay)) || !e.DueAfter.After(e.DueBefore) {
			t.Fatalf("merged entry %+v: want the due time pushed to now+%v", e, delay)
		}
	}
	if !j.RunAt.Equal(j.Journal[2].DueAfter) {
		t.Fatalf("due %v, last merge says %v", j.RunAt, j.Journal[2].DueAfter)
	}
	// Refetches: the first one opens a window of RefetchDelay (an hour); the others keep it.
	code, first := b.do(t, "POST", "/bookmarks/"+bookmark+"/refetch", "")
	if code != 202 {
		t.Fatalf("refetch = %d %v", code, first)
	}
	fetch, err := ulid.Parse(first["job_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.do(t, "POST", "/bookmarks/"+bookmark+"/refetch", "")
	}
	j, err = q.Job(ctx, fetch)
	if err != nil {
		t.Fatal(err)
	}
	last := j.Journal[len(j.Journal)-1]
	if last.Due != "keep" || !last.DueAfter.Equal(last.DueBefore) || !j.RunAt.Equal(last.DueAfter) {
		t.Fatalf("refetch merge %+v, job due %v: want the due time kept", last, j.RunAt)
	}
}
