package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// TestImportItemsAreCheckedAsBookmarks: every import item's URL goes through POST
// /bookmarks's validation and normalisation. A URL that POST /bookmarks refuses makes the
// import a 422 with the same message, for that item (items[i].url), and imports nothing; a
// URL it accepts is stored in the form a bookmark stores it. Past maxItemErrors invalid
// items, the field items says how many there are.
func TestImportItemsAreCheckedAsBookmarks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, bad := range []string{
		"javascript:alert(1)", "file:///etc/passwd", "gopher://127.0.0.1:70/_GET", "ftp://a/", "https://u:p@a/", "https://u@a/",
		"https://a:99999/", "https://a:0/", "https:///nohost", "//a/b", "a/b", "https://a/\u0000",
		"https://a/" + strings.Repeat("é", 1020), "https://a/" + strings.Repeat("x", 2100), "   ",
	} {
		quoted, _ := json.Marshal(bad)
		code, bm := b.do(t, http.MethodPost, "/bookmarks", `{"url":`+string(quoted)+`}`)
		p, _ := bm["error"].(map[string]any)
		fields, _ := p["fields"].(map[string]any)
		want, _ := fields["url"].(string)
		if code != 422 || want == "" {
			t.Fatalf("POST /bookmarks %q = %d %v, want 422 url", bad, code, bm)
		}
		code, imp := b.do(t, http.MethodPost, "/imports", `{"items":[{"url":"https://example.com/"},{"url":`+string(quoted)+`}]}`)
		p, _ = imp["error"].(map[string]any)
		fields, _ = p["fields"].(map[string]any)
		if code != 422 || fields["items[1].url"] != want || len(fields) != 1 {
			t.Fatalf("an import item %q = %d %v, want 422 with items[1].url %q", bad, code, imp, want)
		}
	}
	if n := b.count(t, "bookmark_import"); n != 0 {
		t.Fatalf("refused imports stored %d imports", n)
	}

	// Accepted URLs are stored as a bookmark stores them.
	good := []string{"https://Example.COM/a#frag", " https://a/?q=a b ", "http://[::1]/", "http://2130706433/", "https://a/é?q=é", "https://a/\u2028"}
	items := make([]map[string]string, len(good))
	for i, u := range good {
		items[i] = map[string]string{"url": u}
	}
	body, _ := json.Marshal(map[string]any{"items": items})
	code, imp := b.do(t, http.MethodPost, "/imports", string(body))
	if code != 202 {
		t.Fatalf("import = %d %v", code, imp)
	}
	rows, err := b.pool.Query(context.Background(), "SELECT url FROM bookmark_import_item WHERE import_id = $1 ORDER BY position",
		uuidOf(ulid.MustParseStrict(imp["id"].(string))))
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, u)
	}
	if len(stored) != len(good) {
		t.Fatalf("stored %v", stored)
	}
	for i, u := range good {
		quoted, _ := json.Marshal(u)
		code, bm := b.do(t, http.MethodPost, "/bookmarks", `{"url":`+string(quoted)+`}`)
		if code != 201 || bm["url"] != stored[i] {
			t.Fatalf("%q: the import stored %q, a bookmark %v (%d)", u, stored[i], bm["url"], code)
		}
	}

	// Many invalid items: the first maxItemErrors are named, and items counts them all.
	many := make([]map[string]string, maxItemErrors+5)
	for i := range many {
		many[i] = map[string]string{"url": "ftp://a/" + strconv.Itoa(i)}
	}
	body, _ = json.Marshal(map[string]any{"items": many})
	code, out := b.do(t, http.MethodPost, "/imports", string(body))
	fields, _ := out["error"].(map[string]any)["fields"].(map[string]any)
	if code != 422 || len(fields) != maxItemErrors+1 || fields["items["+strconv.Itoa(maxItemErrors-1)+"].url"] == nil ||
		!strings.HasPrefix(fields["items"].(string), strconv.Itoa(maxItemErrors+5)+" items are invalid") {
		t.Fatalf("%d invalid items = %d with %d fields (items: %v)", len(many), code, len(fields), fields["items"])
	}
}
