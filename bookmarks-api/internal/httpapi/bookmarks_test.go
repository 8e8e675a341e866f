package httpapi

import (
	"context"
	"fmt"
	"reflect"
	"testing"
)

func TestBookmarkLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, bm := b.do(t, "POST", "/bookmarks", `{"url":"https://Example.com/a#frag","title":" A ","tags":["Go","db","go"]}`)
	if code != 201 || bm["url"] != "https://example.com/a" || bm["title"] != "A" || bm["fetch_status"] != "pending" {
		t.Fatalf("create = %d %v", code, bm)
	}
	if tags := bm["tags"].([]any); len(tags) != 2 || tags[0] != "go" {
		t.Fatalf("tags = %v", tags)
	}
	job := bm["fetch_job"].(map[string]any)
	// An interactive fetch: the default queue, and its host's partition.
	if job["state"] != "available" || job["kind"] != "fetch_bookmark" || job["queue"] != "default" || job["partition"] != "example.com" {
		t.Fatalf("fetch job = %v", job)
	}
	if _, ok := job["circuit"]; ok {
		t.Fatalf("fetch job shows a circuit before any fetch: %v", job)
	}
	id := bm["id"].(string)

	code, got := b.do(t, "GET", "/bookmarks/"+id, "")
	if code != 200 || got["id"] != id {
		t.Fatalf("get = %d %v", code, got)
	}
	// The create's answer is built from what its transaction wrote (no read back of the
	// bookmark): it must be what a read shows while the fetch has not run.
	if !reflect.DeepEqual(bm, got) {
		t.Fatalf("create answered %v, a read shows %v", bm, got)
	}
	// Refetches coalesce into the pending job.
	code, r1 := b.do(t, "POST", "/bookmarks/"+id+"/refetch", "")
	_, r2 := b.do(t, "POST", "/bookmarks/"+id+"/refetch", "")
	if code != 202 || r1["job_id"] != job["id"] || r2["job_id"] != job["id"] || r2["action"] != "replaced" {
		t.Fatalf("refetch = %d %v %v, want both in job %v", code, r1, r2, job["id"])
	}
	// The tag rebuild was enqueued with a delay and merges.
	code, tr := b.do(t, "POST", "/tags/rebuild", `{"tags":["web"]}`)
	if code != 202 || tr["action"] != "merged" {
		t.Fatalf("tags/rebuild = %d %v", code, tr)
	}
	code, list := b.do(t, "GET", "/bookmarks?limit=1", "")
	if _, more := list["next"]; code != 200 || len(list["items"].([]any)) != 1 || more { // the only page: no next
		t.Fatalf("list = %d %v", code, list)
	}
	code, list = b.do(t, "GET", "/bookmarks?before="+id, "")
	if code != 200 || len(list["items"].([]any)) != 0 {
		t.Fatalf("second page = %d %v", code, list)
	}
	code, list = b.do(t, "GET", "/bookmarks?tag=db", "")
	if code != 200 || len(list["items"].([]any)) != 1 {
		t.Fatalf("by tag = %d %v", code, list)
	}
	if code, _ := b.do(t, "GET", "/tags", ""); code != 200 {
		t.Fatalf("tags = %d", code)
	}
	if code, _ := b.do(t, "DELETE", "/bookmarks/"+id, ""); code != 204 {
		t.Fatalf("delete = %d", code)
	}
	if code, _ := b.do(t, "GET", "/bookmarks/"+id, ""); code != 404 {
		t.Fatalf("get deleted = %d", code)
	}
}

// TestCreateEnqueuesOneFetch: the bookmark table's trigger (migration 8) enqueues fetches
// only for rows inserted without one, so a bookmark created through the API has exactly
// the fetch the API enqueued, and its tags one rebuild.
func TestCreateEnqueuesOneFetch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	jobs := map[string]bool{}
	for i := range 3 {
		code, bm := b.do(t, "POST", "/bookmarks", fmt.Sprintf(`{"url":"https://one%d.example/","tags":["one"]}`, i))
		if code != 201 {
			t.Fatalf("create = %d %v", code, bm)
		}
		jobs[bm["fetch_job"].(map[string]any)["id"].(string)] = true
	}
	var fetches, pointed, keyed, rebuilds, deferred int
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM venturi_job WHERE kind = 'fetch_bookmark'),
		(SELECT count(*) FROM bookmark bm JOIN venturi_job j ON j.id = bm.fetch_job_id),
		(SELECT count(*) FROM venturi_job WHERE kind = 'fetch_bookmark' AND meta ? 'key'),
		(SELECT count(*) FROM venturi_job WHERE kind = 'rebuild_tag_index'),
		(SELECT count(*) FROM venturi_deferred_merge)`).Scan(&fetches, &pointed, &keyed, &rebuilds, &deferred)
	if err != nil {
		t.Fatal(err)
	}
	if fetches != 3 || pointed != 3 || keyed != 3 || rebuilds != 1 || deferred != 0 || len(jobs) != 3 {
		t.Fatalf("%d fetch jobs (%d named by their bookmark, %d with the caller's key), %d rebuilds, %d deferred merges; want 3, 3, 3, 1, 0",
			fetches, pointed, keyed, rebuilds, deferred)
	}
}
