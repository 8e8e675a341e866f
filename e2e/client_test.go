package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"
)

// Deadlines: generous upper bounds on asynchronous outcomes, never expectations of speed.
const (
	fetchDeadline   = 45 * time.Second
	restartDeadline = 60 * time.Second
	pollEvery       = 50 * time.Millisecond
)

var httpClient = &http.Client{Timeout: 10 * time.Second}

// call sends a JSON request to the API with the suite's key and decodes the JSON answer
// into out (if not nil).
func call(method, path string, body any, out any) (int, error) {
	resp, err := callAs(sys.key, method, path, body, out)
	if resp == nil {
		return 0, err
	}
	return resp.StatusCode, err
}

// callAs is call with another key ("" for none); it returns the response (its body read
// and decoded into out) for its headers.
func callAs(key, method, path string, body any, out any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, sys.apiURL+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, err
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp, fmt.Errorf("decode %s: %w", b, err)
		}
	}
	return resp, nil
}

func mustCall(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	code, err := call(method, path, body, out)
	if err != nil || code != want {
		t.Fatalf("%s %s = %d, %v; want %d", method, path, code, err, want)
	}
}

// waitReady polls /readyz until the API answers 200.
func waitReady(ctx context.Context) error {
	deadline := time.Now().Add(restartDeadline)
	for {
		code, err := call("GET", "/readyz", nil, nil)
		if err == nil && code == 200 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API was not ready within %v: %d %v", restartDeadline, code, err)
		}
		select {
		case <-time.After(pollEvery):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// eventually polls cond until it returns true or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		if state != "" {
			last = state
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last state: %s", what, d, last)
		}
		select {
		case <-time.After(pollEvery):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

type journalEntry struct {
	Event      string          `json:"event"`
	Run        int             `json:"run"`
	Note       string          `json:"note"`
	Merge      string          `json:"merge"`
	Attachment json.RawMessage `json:"attachment"`
	Wait       []string        `json:"wait"`
	ResumeInMS int64           `json:"resume_in_ms"`
}

type job struct {
	ID           string          `json:"id"`
	Kind         string          `json:"kind"`
	State        string          `json:"state"`
	Runs         int             `json:"runs"`
	Failures     int             `json:"failures"`
	Carry        json.RawMessage `json:"carry"`
	Journal      []journalEntry  `json:"journal"` // the last 20 entries
	JournalTotal int             `json:"journal_total"`
	Queue        string          `json:"queue"`
	Partition    string          `json:"partition"`
	Circuit      *struct {
		State     string     `json:"state"`
		Failures  int        `json:"failures"`
		OpenUntil *time.Time `json:"open_until"`
	} `json:"circuit"`
}

type bookmark struct {
	ID             string   `json:"id"`
	URL            string   `json:"url"`
	Tags           []string `json:"tags"`
	FetchStatus    string   `json:"fetch_status"`
	FetchError     string   `json:"fetch_error"`
	HTTPStatus     *int     `json:"http_status"`
	PageTitle      string   `json:"page_title"`
	ContentSummary string   `json:"content_summary"`
	FetchJob       *job     `json:"fetch_job"`
}

func create(t *testing.T, url string, tags ...string) bookmark {
	t.Helper()
	var b bookmark
	mustCall(t, "POST", "/bookmarks", map[string]any{"url": url, "tags": tags}, 201, &b)
	return b
}

// waitBookmark waits until the bookmark's fetch status is want (and its job has finished).
func waitBookmark(t *testing.T, id, want string, d time.Duration) bookmark {
	t.Helper()
	var b bookmark
	eventually(t, d, "bookmark "+id+" "+want, func() (bool, string) {
		code, err := call("GET", "/bookmarks/"+id, nil, &b)
		if err != nil || code != 200 {
			return false, fmt.Sprintf("GET: %d %v", code, err)
		}
		done := b.FetchJob != nil && (b.FetchJob.State == "completed" || b.FetchJob.State == "dead")
		return b.FetchStatus == want && done, fmt.Sprintf("%s, job %+v", b.FetchStatus, b.FetchJob)
	})
	return b
}

// jobRow reads a job with read-only SQL.
func jobRow(t *testing.T, id string) (state string, payload, carry []byte, journal []journalEntry) {
	t.Helper()
	u, err := ulid.ParseStrict(id)
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	err = sys.db.Pool.QueryRow(t.Context(), "SELECT state::text, payload, carry, journal FROM venturi_job_all WHERE id = $1",
		pgtype.UUID{Bytes: u, Valid: true}).Scan(&state, &payload, &carry, &raw)
	if err != nil {
		t.Fatalf("read job %s: %v", id, err)
	}
	if err := json.Unmarshal(raw, &journal); err != nil {
		t.Fatal(err)
	}
	return
}

func events(j []journalEntry) []string {
	var out []string
	for _, e := range j {
		out = append(out, e.Event)
	}
	return out
}
