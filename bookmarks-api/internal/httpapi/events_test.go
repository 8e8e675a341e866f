package httpapi

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
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

// longPoll is a GET /events?wait= sent in the background: done closes when it answers.
type longPoll struct {
	rec  *httptest.ResponseRecorder
	done chan struct{}
}

// startLongPoll sends GET /events?wait=20s with key; returned counts the answers.
func (b *testBundle) startLongPoll(key string, returned *atomic.Int32) *longPoll {
	p := &longPoll{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		req := httptest.NewRequest(http.MethodGet, "/events?wait=20s", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		p.rec = b.serve(req)
		returned.Add(1)
	}()
	return p
}

// wait waits for the long poll's answer and checks it: 200 with an event of key's.
func (p *longPoll) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-p.done:
	case <-t.Context().Done():
		t.Fatalf("%s: no answer", what)
	}
	if p.rec.Code != http.StatusOK || !strings.Contains(p.rec.Body.String(), `"event":"enqueued"`) {
		t.Fatalf("%s = %d %s, want 200 with the key's event", what, p.rec.Code, p.rec.Body.String())
	}
}

// TestLongPollsAreBounded: a key may have DefaultMaxLongPollsPerKey long polls waiting;
// another is 429 with Retry-After, while GET /events without wait still answers. Past the
// process's bound (3 here) a long poll is 503 with Retry-After, whatever its key. Places
// free up when polls answer.
func TestLongPollsAreBounded(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, MaxLongPolls: 3, RequestTimeout: 25 * time.Second})
	other := b.newKey(t, "other")
	var returned atomic.Int32
	a1, a2 := b.startLongPoll(b.key, &returned), b.startLongPoll(b.key, &returned)
	eventually(t, "two long polls wait", func() (bool, string) { return b.api.longPolls.waiting() == 2, jsonInt(b.api.longPolls.waiting()) })

	rec := b.request(http.MethodGet, "/events?wait=5s", "", nil)
	p, _ := decode(t, rec)["error"].(map[string]any)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get(echo.HeaderRetryAfter) != "1" || p["code"] != "rate_limited" ||
		rec.Header().Get(echo.HeaderCacheControl) != "no-store" ||
		!strings.Contains(p["message"].(string), "GET /events?wait=") {
		t.Fatalf("a third long poll of one key = %d %v %s, want 429 with Retry-After", rec.Code, rec.Header(), rec.Body.String())
	}
	if code, page := b.do(t, http.MethodGet, "/events", ""); code != http.StatusOK {
		t.Fatalf("GET /events without wait at the key's bound = %d %v", code, page)
	}
	o1 := b.startLongPoll(other, &returned)
	eventually(t, "three long polls wait", func() (bool, string) { return b.api.longPolls.waiting() == 3, jsonInt(b.api.longPolls.waiting()) })
	rec = b.request(http.MethodGet, "/events?wait=5s", "", map[string]string{"Authorization": "Bearer " + other})
	p, _ = decode(t, rec)["error"].(map[string]any)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get(echo.HeaderRetryAfter) != "1" || p["code"] != "overloaded" {
		t.Fatalf("a long poll past the process's bound = %d %v %s, want 503 with Retry-After", rec.Code, rec.Header(), rec.Body.String())
	}
	if n := returned.Load(); n != 0 {
		t.Fatalf("%d long polls answered before their keys had events", n)
	}

	// Each key's bookmark ends its polls; their places are free again.
	if code, out := b.do(t, http.MethodPost, "/bookmarks", `{"url":"https://example.com/a"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, out)
	}
	if rec := b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/b"}`, map[string]string{"Authorization": "Bearer " + other}); rec.Code != http.StatusCreated {
		t.Fatalf("create with the other key: %d", rec.Code)
	}
	a1.wait(t, "first long poll")
	a2.wait(t, "second long poll")
	o1.wait(t, "the other key's long poll")
	if n := b.api.longPolls.waiting(); n != 0 {
		t.Fatalf("%d long polls still counted after they answered", n)
	}
	if rec := b.request(http.MethodGet, "/events?wait=10ms&after="+url.QueryEscape(decode(t, a1.rec)["cursor"].(string)), "", nil); rec.Code != http.StatusOK {
		t.Fatalf("a long poll after the others answered = %d %s", rec.Code, rec.Body.String())
	}
}

// TestLongPollsLeaveOthersAnswering: with a pool of pgxpool's default size (max(4, CPUs),
// the API's) and every one of several keys at its bound of waiting long polls (twice as
// many polls as connections), the API still answers another key's requests and /readyz
// while all those polls still wait; then each key's bookmark ends its polls, with the
// event. The outcome is ordering (the others answer before any poll), not durations.
func TestLongPollsLeaveOthersAnswering(t *testing.T) {
	t.Parallel()
	poolSize := max(4, runtime.NumCPU())
	b := setupPool(t, Config{WriteLimit: Unlimited, ImportLimit: Unlimited, RequestTimeout: 25 * time.Second}, int32(poolSize))
	keys := make([]string, min(poolSize, DefaultMaxLongPolls/DefaultMaxLongPollsPerKey))
	var returned atomic.Int32
	var polls []*longPoll
	for i := range keys {
		keys[i] = b.newKey(t, "poller-"+jsonInt(i))
		for range DefaultMaxLongPollsPerKey {
			polls = append(polls, b.startLongPoll(keys[i], &returned))
		}
	}
	eventually(t, "every long poll waits", func() (bool, string) {
		return b.api.longPolls.waiting() == len(polls), jsonInt(b.api.longPolls.waiting())
	})

	other := map[string]string{"Authorization": "Bearer " + b.newKey(t, "other")}
	rec := b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/other"}`, other)
	if rec.Code != http.StatusCreated {
		t.Fatalf("another key's create while %d long polls wait = %d %s", len(polls), rec.Code, rec.Body.String())
	}
	id := decode(t, rec)["id"].(string)
	for _, path := range []string{"/bookmarks", "/bookmarks/" + id, "/events", "/tags", "/readyz", "/healthz"} {
		if rec := b.request(http.MethodGet, path, "", other); rec.Code != http.StatusOK {
			t.Fatalf("GET %s while %d long polls wait = %d %s", path, len(polls), rec.Code, rec.Body.String())
		}
	}
	if n := returned.Load(); n != 0 {
		t.Fatalf("%d long polls answered before the other requests did: those waited for the polls to end", n)
	}

	for i, k := range keys {
		if rec := b.request(http.MethodPost, "/bookmarks", `{"url":"https://example.com/`+jsonInt(i)+`"}`,
			map[string]string{"Authorization": "Bearer " + k}); rec.Code != http.StatusCreated {
			t.Fatalf("create with key %d = %d", i, rec.Code)
		}
	}
	for i, p := range polls {
		p.wait(t, "long poll "+jsonInt(i))
	}
}
