package httpapi

import (
	"fmt"
	"strings"
	"testing"
)

// TestPaginationLastPageExactlyFull: a last page that is exactly full has no next (it
// used to point at an empty page), and a page with more behind it does.
func TestPaginationLastPageExactlyFull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i := range 4 {
		if code, body := b.do(t, "POST", "/bookmarks", fmt.Sprintf(`{"url":"https://p%d.example/"}`, i)); code != 201 {
			t.Fatalf("create: %d %v", code, body)
		}
	}
	code, page := b.do(t, "GET", "/bookmarks?limit=2", "")
	if code != 200 || len(page["items"].([]any)) != 2 || page["next"] == nil {
		t.Fatalf("first page: %d %v", code, page)
	}
	code, last := b.do(t, "GET", "/bookmarks?limit=2&before="+page["next"].(string), "")
	if code != 200 || len(last["items"].([]any)) != 2 {
		t.Fatalf("second page: %d %v", code, last)
	}
	if next, ok := last["next"]; ok {
		t.Fatalf("the last page, exactly full, has next %v", next)
	}
}

// TestBodyTooLargeNamesTheLimit: a 413 says what the limit is.
func TestBodyTooLargeNamesTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for path, limit := range map[string]string{"/bookmarks": "64 KiB", "/imports": "1 MiB"} {
		body := `{"url":"https://a/","title":"` + strings.Repeat("x", 2<<20) + `"}`
		code, out := b.do(t, "POST", path, body)
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if code != 413 || !strings.Contains(msg, limit) {
			t.Fatalf("POST %s: %d %q, want 413 naming %s", path, code, msg, limit)
		}
	}
}

// TestHeadHealth: load balancers probe with HEAD.
func TestHeadHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := b.do(t, "HEAD", path, ""); code != 200 {
			t.Fatalf("HEAD %s = %d, want 200", path, code)
		}
	}
}
