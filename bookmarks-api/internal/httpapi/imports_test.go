package httpapi

import (
	"testing"
)

func TestImports(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, imp := b.do(t, "POST", "/imports", `{"items":[{"url":"https://a/"},{"url":"https://b/","title":"b"}],"tags":["imported"],"page_size":1}`)
	if job := imp["job"].(map[string]any); code != 202 || imp["total"] != float64(2) || imp["status"] != "pending" ||
		job["kind"] != "import_bookmarks" || job["queue"] != "imports" || imp["workflow"].(map[string]any)["state"] != "open" {
		t.Fatalf("create import = %d %v", code, imp)
	}
	if code, got := b.do(t, "GET", "/imports/"+imp["id"].(string), ""); code != 200 || got["id"] != imp["id"] {
		t.Fatalf("get import = %d %v", code, got)
	}
}
