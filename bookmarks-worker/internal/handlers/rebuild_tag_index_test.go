package handlers

// Tag-index rebuilds, handled in chunks (venturi.RegisterChunks), on a real worker.

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

// TestRebuildTagIndexRecountsItsTags: a rebuild recounts only its tags, dropping those no
// bookmark uses, and records what it covered: here one job into which two more requests
// merged while it was pending, alone in its chunk.
func TestRebuildTagIndexRecountsItsTags(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, tags := range []string{"{go,db}", "{go}"} {
		// Bookmarks already fetched: the table's trigger enqueues nothing for them.
		if _, err := b.pool.Exec(ctx, "INSERT INTO bookmark (id, url, tags, fetch_status) VALUES ($1, 'https://x/', $2, 'fetched')", uuidOf(ulid.Make()), tags); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(ctx, "INSERT INTO tag_index (tag, bookmark_count) VALUES ('gone', 3)"); err != nil {
		t.Fatal(err)
	}
	var job ulid.ULID
	for _, tag := range []string{"gone", "go", "go"} {
		res, err := b.queue.Enqueue(ctx, tasks.NewRebuildTagIndex(tag))
		if err != nil {
			t.Fatal(err)
		}
		job = res.ID
	}
	b.start(t)
	j := b.waitJob(t, job, venturi.StateCompleted)
	if e := j.Journal[len(j.Journal)-1]; e.Note != "recounted 2 tag(s) for 3 request(s)" {
		t.Fatalf("note %q", e.Note)
	}
	var att TagIndexAttachment
	if err := json.Unmarshal(j.Journal[len(j.Journal)-1].Attachment, &att); err != nil ||
		!reflect.DeepEqual(att, TagIndexAttachment{Tags: []string{"go", "gone"}, Requests: 3, Merged: 2, Chunk: 1}) {
		t.Fatalf("attachment %+v (%v)", att, err)
	}
	rows, _ := b.pool.Query(ctx, "SELECT tag || '=' || bookmark_count FROM tag_index ORDER BY tag")
	if got, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || strings.Join(got, ",") != "go=2" {
		t.Fatalf("tag index %v (%v), want go=2 only", got, err)
	}
}

// TestTagIndexRebuildsTakeChunks: rebuild jobs that cannot merge (the reindex nodes of
// workflows: venturi never merges a workflow's members) and are claimed together cost one
// recount. Six such jobs, each of another tag, run as one chunk (the chunk's size is six
// here, and its linger far longer than the claims take, so it closes when the sixth
// joins): every job completes noting the chunk, every tag is counted, and the whole index
// was written by one transaction (one rebuilt_at, the transaction's now()).
func TestTagIndexRebuildsTakeChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const n = 6
	wf := venturi.NewWorkflow("a burst of rebuilds")
	var tags []string
	for i := range n {
		tag := fmt.Sprintf("chunk-%d", i)
		tags = append(tags, tag)
		if _, err := b.pool.Exec(ctx, "INSERT INTO bookmark (id, url, tags, fetch_status) VALUES ($1, 'https://x/', $2, 'fetched')",
			uuidOf(ulid.Make()), []string{tag, "shared"}); err != nil {
			t.Fatal(err)
		}
		wf.Add(tag, tasks.NewRebuildTagIndex(tag, "shared"))
	}
	res, err := b.queue.EnqueueWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	b.startWith(t, n+2, 1, []Registration{func(w *Worker) error {
		return registerRebuildTagIndex(w, venturi.ChunkConfig[tasks.RebuildTagIndex]{Size: n, Linger: time.Minute,
			Key: TagIndexChunks().Key})
	}})
	for _, tag := range tags {
		j := b.waitJob(t, res.Jobs[tag], venturi.StateCompleted)
		e := j.Journal[len(j.Journal)-1]
		var att TagIndexAttachment
		if err := json.Unmarshal(e.Attachment, &att); err != nil || att.Chunk != n ||
			e.Note != fmt.Sprintf("recounted %d tag(s) for %d request(s) of %d jobs, in one chunk", n+1, n, n) {
			t.Fatalf("rebuild of %s: note %q, attachment %s (%v)", tag, e.Note, e.Attachment, err)
		}
		var out tasks.TagIndexOutput
		if err := b.queue.WorkflowOutput(ctx, res.ID, tag, &out); err != nil || out != (tasks.TagIndexOutput{Tags: n + 1, Chunk: n}) {
			t.Fatalf("output of %s: %+v (%v)", tag, out, err)
		}
	}
	var counts map[string]int32
	var rebuilt int
	if err := b.pool.QueryRow(ctx, "SELECT jsonb_object_agg(tag, bookmark_count), count(DISTINCT rebuilt_at) FROM tag_index").
		Scan(&counts, &rebuilt); err != nil {
		t.Fatal(err)
	}
	want := map[string]int32{"shared": n}
	for _, tag := range tags {
		want[tag] = 1
	}
	if !reflect.DeepEqual(counts, want) || rebuilt != 1 {
		t.Fatalf("tag index %v written by %d transactions; want %v by one", counts, rebuilt, want)
	}
}
