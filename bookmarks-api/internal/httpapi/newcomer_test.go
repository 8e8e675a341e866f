package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
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

// TestJournalViewUsesMillisecondsAndHidesWorkers: the API's journal shows resume_in in
// milliseconds (it was raw nanoseconds) and no worker IDs (host names) or fencing tokens.
func TestJournalViewUsesMillisecondsAndHidesWorkers(t *testing.T) {
	t.Parallel()
	j := toJob(&venturi.Job{ID: ulid.Make(), Kind: "fetch_bookmark", State: venturi.StateScheduled,
		Journal: []venturi.JournalEntry{{Event: venturi.EventFailed, Run: 1, Note: "timeout",
			ResumeIn: 1500 * time.Millisecond, Worker: "db-host-7-1234-abcd", Token: 42}}})
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, `"resume_in_ms":1500`) || strings.Contains(s, "db-host") || strings.Contains(s, `"token"`) {
		t.Fatalf("journal view %s", s)
	}
}

// TestJobViewShowsTheCircuitThatHoldsIt: a pending fetch whose host's breaker is open
// shows the circuit (why it waits, until when); a closed breaker, or a job that is no
// longer pending, shows none.
func TestJobViewShowsTheCircuitThatHoldsIt(t *testing.T) {
	t.Parallel()
	until := time.Now().Add(time.Minute)
	open := &venturi.Circuit{Kind: "fetch_bookmark", Partition: "down.example", State: venturi.CircuitOpen, Failures: 5, Threshold: 5, OpenUntil: &until}
	job := func(state venturi.State, c *venturi.Circuit) *Job {
		return toJob(&venturi.Job{ID: ulid.Make(), Kind: "fetch_bookmark", State: state, Queue: "default", Partition: "down.example", Circuit: c})
	}
	j := job(venturi.StateScheduled, open)
	if j.Queue != "default" || j.Partition != "down.example" || j.Circuit == nil || j.Circuit.State != "open" ||
		j.Circuit.Failures != 5 || j.Circuit.OpenUntil == nil || !j.Circuit.OpenUntil.Equal(until) {
		t.Fatalf("pending job under an open breaker: %+v circuit %+v", j, j.Circuit)
	}
	closed := *open
	closed.State, closed.OpenUntil = venturi.CircuitClosed, nil
	for _, j := range []*Job{job(venturi.StateAvailable, &closed), job(venturi.StateCompleted, open), job(venturi.StateAvailable, nil)} {
		if j.Circuit != nil {
			t.Fatalf("job shows circuit %+v", j.Circuit)
		}
	}
}
