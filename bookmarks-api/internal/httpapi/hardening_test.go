package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// failingBody yields some JSON, then the error a server sees when a client stalls or goes
// away: a net.OpError naming both addresses.
type failingBody struct{ sent bool }

var errRead = &net.OpError{Op: "read", Net: "tcp",
	Source: &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 8080},
	Addr:   &net.TCPAddr{IP: net.ParseIP("203.0.113.9"), Port: 51234}, Err: os.ErrDeadlineExceeded}

func (f *failingBody) Read(p []byte) (int, error) {
	if !f.sent {
		f.sent = true
		return copy(p, `{"url":"https://a.exa`), nil
	}
	return 0, errRead
}

// TestBodyReadErrorIsNotSent: a body that cannot be read is a 400 with a generic message;
// the cause, which names network addresses, is logged with the request ID.
func TestBodyReadErrorIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/bookmarks", "/imports", "/tags/rebuild"} {
		req := b.auth(httptest.NewRequest("POST", path, &failingBody{}))
		req.Header.Set("Content-Type", "application/json")
		rec := b.serve(req)
		var p Problem
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("%s: %q: %v", path, rec.Body.String(), err)
		}
		if rec.Code != 400 || p.Error.Message != "the request body could not be read" {
			t.Fatalf("%s: %d %+v", path, rec.Code, p.Error)
		}
		requireNoLeak(t, rec.Body.String())
		if strings.Contains(rec.Body.String(), "203.0.113.9") || strings.Contains(rec.Body.String(), "10.1.2.3") {
			t.Fatalf("%s: an address reached the client: %s", path, rec.Body.String())
		}
		logged := false
		for line := range strings.Lines(b.logs.String()) {
			if strings.Contains(line, "request body unreadable") && strings.Contains(line, p.Error.RequestID) &&
				strings.Contains(line, "203.0.113.9") {
				logged = true
			}
		}
		if !logged {
			t.Fatalf("%s: the cause was not logged with request ID %s:\n%s", path, p.Error.RequestID, b.logs.String())
		}
	}
}

// TestDatabaseErrorsDoNotLeak: with the application's tables gone, every endpoint that uses
// them is a 500 saying "internal error" (do checks every error body for pgx and
// PostgreSQL texts), and the cause is logged.
func TestDatabaseErrorsDoNotLeak(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, bm := b.do(t, "POST", "/bookmarks", `{"url":"https://a.example/","tags":["go"]}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, bm)
	}
	id := bm["id"].(string)
	for _, table := range []string{"bookmark", "bookmark_import", "tag_index"} {
		if _, err := b.pool.Exec(context.Background(), "ALTER TABLE "+table+" RENAME TO "+table+"_gone"); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/bookmarks", `{"url":"https://b.example/"}`},
		{"GET", "/bookmarks", ""},
		{"GET", "/bookmarks/" + id, ""},
		{"POST", "/bookmarks/" + id + "/refetch", ""},
		{"DELETE", "/bookmarks/" + id, ""},
		{"POST", "/imports", `{"items":[{"url":"https://a.example/"}]}`},
		{"GET", "/imports/" + ulid.Make().String(), ""},
		{"GET", "/tags", ""},
	} {
		code, body := b.do(t, r.method, r.path, r.body)
		if msg := body["error"].(map[string]any)["message"]; code != 500 || msg != "internal error" {
			t.Fatalf("%s %s: %d %v", r.method, r.path, code, body)
		}
	}
	if !strings.Contains(b.logs.String(), "does not exist") {
		t.Fatalf("the causes were not logged: %s", b.logs.String())
	}
}

// TestTypeErrorsNameTheValidationPath: a value of the wrong JSON type is named with the
// same path form as a validation error (items[1].url, never items.url), in the message and
// in fields.
func TestTypeErrorsNameTheValidationPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := "https://a.example/" + strings.Repeat("x", 2100)
	for _, tt := range []struct {
		path, body string
		status     int
		field      string
	}{
		{"/imports", `{"items":[{"url":"https://a/"},{"url":5}]}`, 400, "items[1].url"},
		{"/imports", `{"items":[{"url":"https://a/"},{"url":"` + long + `"}]}`, 422, "items[1].url"},
		{"/imports", `{"items":[{"url":"https://a/"},{"url":"https://b/","title":true}]}`, 400, "items[1].title"},
		{"/imports", `{"items":[{"url":"https://a/"},{"url":"https://b/","title":"a\u0000"}]}`, 422, "items[1].title"},
		{"/imports", `{"items":[{"url":"https://a/","title":["x"]}]}`, 400, "items[0].title"},
		{"/imports", `{"items":[{"url":"https://a/"},{"url":{"nested":[1,{"x":2}]}}]}`, 400, "items[1].url"},
		{"/imports", `{"items":[1]}`, 400, "items[0]"},
		{"/imports", `{"items":{"url":"x"}}`, 400, "items"},
		{"/imports", `{"items":[{"url":"https://a/"}],"page_size":"50"}`, 400, "page_size"},
		{"/imports", `{"items":[{"url":"https://a/"}],"tags":["a",{"b":1}]}`, 400, "tags[1]"},
		{"/imports", ` { "it\u0065ms" : [ {"url":"https://a/"} , { "url" : 5 } ] } `, 400, "items[1].url"},
		{"/imports", `{"items":[{"URL":5}]}`, 400, "items[0].url"}, // keys match fields in any case
		{"/bookmarks", `{"url":"https://a/","tags":["a",1]}`, 400, "tags[1]"},
		{"/bookmarks", `{"url":{"a":[1,2]}}`, 400, "url"},
		{"/bookmarks", `{"url":"https://a/","title":1e999}`, 400, "title"},
		{"/tags/rebuild", `{"tags":["a"],"delay_ms":"5"}`, 400, "delay_ms"},
		{"/tags/rebuild", `{"tags":["a"],"delay_ms":1.5}`, 400, "delay_ms"},
	} {
		t.Run(tt.path+" "+tt.field, func(t *testing.T) {
			code, out := b.do(t, "POST", tt.path, tt.body)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %v", code, tt.status, out)
			}
			detail := out["error"].(map[string]any)
			fields, _ := detail["fields"].(map[string]any)
			if _, ok := fields[tt.field]; !ok || len(fields) != 1 && tt.status == 400 {
				t.Fatalf("fields %v, want %q", fields, tt.field)
			}
			if msg := detail["message"].(string); tt.status == 400 && !strings.Contains(msg, `"`+tt.field+`"`) {
				t.Fatalf("message %q does not name %q", msg, tt.field)
			}
		})
	}
	// The body itself of the wrong type has no field.
	code, out := b.do(t, "POST", "/bookmarks", `[]`)
	if detail := out["error"].(map[string]any); code != 400 || detail["message"] != "the body must be a JSON object" || detail["fields"] != nil {
		t.Fatalf("[] = %d %v", code, out)
	}
}

// TestTagsArePaginated: GET /tags pages with limit (default 100, at most 1000) and the
// after cursor, most used first; every tag is listed once.
func TestTagsArePaginated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 250
	if _, err := b.pool.Exec(context.Background(),
		`INSERT INTO tag_index (tag, bookmark_count) SELECT 'tag-' || lpad(i::text, 3, '0'), i % 7 + 1 FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	type page struct {
		Items []Tag  `json:"items"`
		Next  string `json:"next"`
	}
	get := func(query string) page {
		t.Helper()
		rec := b.serve(b.auth(httptest.NewRequest("GET", "/tags"+query, nil)))
		var p page
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &p) != nil {
			t.Fatalf("GET /tags%s: %d %s", query, rec.Code, rec.Body.String())
		}
		return p
	}
	if p := get(""); len(p.Items) != DefaultTagPage || p.Next == "" {
		t.Fatalf("default page: %d items, next %q", len(p.Items), p.Next)
	}
	for _, limit := range []int{100, 125, 7, 1000} {
		var all []Tag
		pages := 0
		for q := fmt.Sprintf("?limit=%d", limit); ; pages++ {
			p := get(q)
			if len(p.Items) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(p.Items))
			}
			all = append(all, p.Items...)
			if p.Next == "" {
				break
			}
			q = fmt.Sprintf("?limit=%d&after=%s", limit, p.Next)
		}
		if len(all) != n || pages != (n-1)/limit {
			t.Fatalf("limit %d: %d tags in %d pages (want %d in %d; a full last page has no next)", limit, len(all), pages+1, n, (n-1)/limit+1)
		}
		if !slices.IsSortedFunc(all, func(x, y Tag) int {
			if x.Count != y.Count {
				return int(y.Count - x.Count)
			}
			return strings.Compare(x.Tag, y.Tag)
		}) {
			t.Fatalf("limit %d: not most used first, then by name", limit)
		}
		seen := map[string]bool{}
		for _, tg := range all {
			if seen[tg.Tag] {
				t.Fatalf("limit %d: %s listed twice", limit, tg.Tag)
			}
			seen[tg.Tag] = true
		}
	}
	for q, field := range map[string]string{
		"?limit=0": "limit", "?limit=1001": "limit", "?limit=x": "limit",
		"?after=x": "after", "?after=5": "after", "?after=-1:go": "after", "?after=5:Bad%20Tag": "after", "?after=go:5": "after",
	} {
		code, out := b.do(t, "GET", "/tags"+q, "")
		fields, _ := out["error"].(map[string]any)["fields"].(map[string]any)
		if code != 422 || fields[field] == nil {
			t.Fatalf("GET /tags%s = %d %v, want 422 on %s", q, code, out, field)
		}
	}
}

// TestJournalShowsTheLast20: GET /bookmarks/{id} shows the last MaxJournalEntries entries
// of the fetch job's journal, oldest first, and journal_total counts them all.
func TestJournalShowsTheLast20(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, bm := b.do(t, "POST", "/bookmarks", `{"url":"https://a.example/"}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, bm)
	}
	id := bm["id"].(string)
	if job := bm["fetch_job"].(map[string]any); job["journal_total"] != float64(0) || len(job["journal"].([]any)) != 0 {
		t.Fatalf("a new job's journal: %v", job)
	}
	const refetches = 25 // each merges into the pending job: one journal entry each
	for range refetches {
		if code, out := b.do(t, "POST", "/bookmarks/"+id+"/refetch", ""); code != 202 {
			t.Fatalf("refetch: %d %v", code, out)
		}
	}
	_, got := b.do(t, "GET", "/bookmarks/"+id, "")
	job := got["fetch_job"].(map[string]any)
	if job["journal_total"] != float64(refetches) || len(job["journal"].([]any)) != MaxJournalEntries {
		t.Fatalf("journal: %d shown, total %v; want %d of %d", len(job["journal"].([]any)), job["journal_total"], MaxJournalEntries, refetches)
	}

	// Which entries: the latest, in order.
	entries := make([]venturi.JournalEntry, 50)
	for i := range entries {
		entries[i] = venturi.JournalEntry{Event: venturi.EventFailed, Run: i + 1, Note: fmt.Sprint("run ", i+1)}
	}
	j := toJob(&venturi.Job{ID: ulid.Make(), Journal: entries, JournalLen: 50})
	if j.JournalTotal != 50 || len(j.Journal) != MaxJournalEntries || j.Journal[0].Run != 31 || j.Journal[19].Run != 50 {
		t.Fatalf("toJob: total %d, runs %d..%d", j.JournalTotal, j.Journal[0].Run, j.Journal[len(j.Journal)-1].Run)
	}
	if j := toJob(&venturi.Job{ID: ulid.Make(), Journal: entries[:3], JournalLen: 3}); j.JournalTotal != 3 || len(j.Journal) != 3 {
		t.Fatalf("toJob of a short journal: %+v", j)
	}
}

// TestTagRebuildPayloadStaysBounded: requests naming ever new tags merge into one pending
// rebuild (no worker runs here, so it stays pending); its stored payload never grows past
// MaxRebuildTags tags, and beyond them it rebuilds all tags. (shared/tasks's
// TestRebuildTagIndexMergeIsBounded folds 100,000 merges without a database.) The API
// refuses a request over its own tag limit, below the merge cap.
func TestTagRebuildPayloadStaysBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// jsonb prints `"tag", ` per tag: the tag, two quotes, a comma and a space.
	bound := tasks.MaxRebuildTags*(tasks.MaxTagLen+4) + 64
	largest := 0
	for i := range 60 { // 5 new tags each: 300 distinct tags
		tags := make([]string, 5)
		for k := range tags {
			tags[k] = fmt.Sprintf(`"t%03d-%s"`, i*5+k, strings.Repeat("x", tasks.MaxTagLen-5))
		}
		if code, out := b.do(t, "POST", "/tags/rebuild", `{"tags":[`+strings.Join(tags, ",")+`],"delay_ms":3600000}`); code != 202 {
			t.Fatalf("rebuild %d: %d %v", i, code, out)
		}
		var jobs, size int
		if err := b.pool.QueryRow(ctx, `SELECT count(*), coalesce(max(octet_length(payload::text)), 0) FROM venturi_job WHERE kind = $1`,
			tasks.KindRebuildTagIndex).Scan(&jobs, &size); err != nil {
			t.Fatal(err)
		}
		if jobs != 1 {
			t.Fatalf("after %d requests: %d rebuild jobs, want one that every request merged into", i+1, jobs)
		}
		largest = max(largest, size)
	}
	var payload []byte
	if err := b.pool.QueryRow(ctx, `SELECT payload FROM venturi_job WHERE kind = $1`, tasks.KindRebuildTagIndex).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var p tasks.RebuildTagIndex
	if err := json.Unmarshal(payload, &p); err != nil || !p.All || p.Requests != 60 {
		t.Fatalf("payload %s (%v), want all tags and 60 requests", payload, err)
	}
	if largest > bound {
		t.Fatalf("the payload reached %d bytes, over %d", largest, bound)
	}
	// One request cannot name more tags than the API's limit, nor a tag over MaxTagLen.
	many := make([]string, maxTags+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"t%d"`, i)
	}
	for _, body := range []string{`{"tags":[` + strings.Join(many, ",") + `]}`, `{"tags":["` + strings.Repeat("x", tasks.MaxTagLen+1) + `"]}`} {
		code, out := b.do(t, "POST", "/tags/rebuild", body)
		if fields, _ := out["error"].(map[string]any)["fields"].(map[string]any); code != 422 || fields["tags"] == nil {
			t.Fatalf("rebuild of %.40s…: %d %v", body, code, out)
		}
	}
}
