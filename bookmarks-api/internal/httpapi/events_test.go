package httpapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestEventsShowTheCallersFetchesAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, bm := b.do(t, http.MethodPost, "/bookmarks", `{"url":"https://example.com/a","title":"a"}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, bm)
	}
	id := bm["id"].(string)

	// wait: an event is readable once older transactions (another test's migration) end.
	code, page := b.do(t, http.MethodGet, "/events?wait=10s", "")
	if code != http.StatusOK {
		t.Fatalf("GET /events: %d %v", code, page)
	}
	evs := page["events"].([]any)
	if len(evs) != 1 {
		t.Fatalf("events %v, want the fetch's enqueued event", evs)
	}
	e := evs[0].(map[string]any)
	if e["bookmark_id"] != id || e["event"] != "enqueued" {
		t.Fatalf("event %v", e)
	}
	cursor := page["cursor"].(string)
	if cursor == "" {
		t.Fatal("no cursor")
	}

	// Resumed from the cursor: nothing is repeated; a refetch's event comes next.
	code, page = b.do(t, http.MethodGet, "/events?after="+url.QueryEscape(cursor), "")
	if code != http.StatusOK || len(page["events"].([]any)) != 0 || page["cursor"] != cursor {
		t.Fatalf("resume: %d %v", code, page)
	}
	if code, out := b.do(t, http.MethodPost, "/bookmarks/"+id+"/refetch", ""); code != http.StatusAccepted {
		t.Fatalf("refetch: %d %v", code, out)
	}
	code, page = b.do(t, http.MethodGet, "/events?wait=10s&after="+url.QueryEscape(cursor), "")
	if code != http.StatusOK || len(page["events"].([]any)) != 1 {
		t.Fatalf("after refetch: %d %v", code, page)
	}
	if e := page["events"].([]any)[0].(map[string]any); e["bookmark_id"] != id || e["event"] != "merged" {
		t.Fatalf("refetch event %v", e)
	}

	// Another key sees none of this key's bookmarks.
	other := b.newKey(t, "other")
	req := httptest.NewRequest(http.MethodGet, "/events", nil)
	req.Header.Set("Authorization", "Bearer "+other)
	rec := b.serve(req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"events":[]`) {
		t.Fatalf("other key: %d %s", rec.Code, rec.Body.String())
	}
	if strings.Contains(rec.Body.String(), id) {
		t.Fatal("another key's bookmark leaked")
	}
}

func TestEventsRefusesBadInputAndAnonymousCallers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.serve(httptest.NewRequest(http.MethodGet, "/events", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("no key: %d", rec.Code)
	}
	for _, q := range []string{"after=nope", "after=e1.zz", "limit=0", "limit=101", "limit=x", "wait=1h", "wait=-1s"} {
		code, out := b.do(t, http.MethodGet, "/events?"+q, "")
		if code != http.StatusBadRequest {
			t.Fatalf("%s: %d %v", q, code, out)
		}
	}
}
