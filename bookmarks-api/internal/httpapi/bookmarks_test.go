package httpapi

import (
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
