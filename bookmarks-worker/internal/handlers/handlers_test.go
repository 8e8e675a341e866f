package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch/fetchtest"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturitest"
)

func TestFetchBookmarkStoresResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fetcher.script["https://a.example/"] = []func() (*fetch.Result, error){ok("Page A")}
	b.start(t)
	id, job := b.bookmark(t, "https://a.example/")
	j := b.waitJob(t, job, venturi.StateCompleted)
	status, title, _, _ := b.row(t, id)
	if status != "fetched" || title != "Page A" {
		t.Fatalf("bookmark = %s %q", status, title)
	}
	var att FetchAttachment
	if err := json.Unmarshal(j.Journal[len(j.Journal)-1].Attachment, &att); err != nil || att.Status != 200 || att.Bytes != 42 || att.FinalURL != "https://final/" {
		t.Fatalf("attachment = %+v (%v)", att, err)
	}
}

func TestFetchBookmarkRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fetcher.script["https://flaky.example/"] = []func() (*fetch.Result, error){
		fail(&fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 503}),
		fail(&fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 429}),
		ok("Finally"),
	}
	b.start(t)
	id, job := b.bookmark(t, "https://flaky.example/")
	j := b.waitJob(t, job, venturi.StateCompleted)
	if j.RunCount != 3 || len(j.Journal) != 3 || j.Journal[0].Event != venturi.EventFailed || j.Journal[1].Event != venturi.EventFailed {
		t.Fatalf("journal = %+v", j.Journal)
	}
	if status, title, _, attempts := b.row(t, id); status != "fetched" || title != "Finally" || attempts != 3 {
		t.Fatalf("bookmark = %s %q attempts %d", status, title, attempts)
	}
}

func TestFetchBookmarkPermanentFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fetcher.script["https://gone.example/"] = []func() (*fetch.Result, error){fail(&fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 410, Permanent: true})}
	b.fetcher.script["http://10.0.0.1/"] = []func() (*fetch.Result, error){fail(&fetch.Error{Reason: fetch.ReasonBlocked, Permanent: true, Err: errors.New("prohibited IP address: 10.0.0.1")})}
	b.fetcher.script["https://down.example/"] = []func() (*fetch.Result, error){fail(&fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 500})}
	b.start(t)
	// A verdict on the page completes the job at once; trouble with the host kills it once
	// the attempts run out.
	for url, want := range map[string]struct {
		code  string
		state venturi.State
		runs  int
	}{
		"https://gone.example/": {"http_status", venturi.StateCompleted, 1},
		"http://10.0.0.1/":      {"blocked_address", venturi.StateCompleted, 1},
		"https://down.example/": {"http_status", venturi.StateDead, 3}, // gives up after MaxFetchAttempts (3)
	} {
		id, job := b.bookmark(t, url)
		j := b.waitJob(t, job, want.state)
		status, _, errText, _ := b.row(t, id)
		if status != "failed" || errText != want.code || j.RunCount != want.runs {
			t.Fatalf("%s: bookmark %s %q after %d runs, want failed %q after %d; journal %+v", url, status, errText, j.RunCount,
				want.code, want.runs, j.Journal)
		}
	}
}

func TestFetchBookmarkDeletedOrSuperseded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, job := b.bookmark(t, "https://deleted.example/")
	if _, err := b.pool.Exec(context.Background(), "DELETE FROM bookmark WHERE id = $1", uuidOf(id)); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	if j := b.waitJob(t, job, venturi.StateCompleted); j.Journal[0].Note != "bookmark deleted; nothing to fetch" {
		t.Fatalf("journal = %+v", j.Journal)
	}
}

func TestImportBookmarksPausesWithCarry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, job := b.newImportJob(t, 3, []string{"imported"}, "https://1.example/", "https://2.example/", "javascript:alert(1)",
		"https://4.example/", "https://5.example/", "ftp://6.example/", "https://7.example/")
	imp, _ := parseID(task.ImportID)
	b.start(t)
	j := b.waitJob(t, job, venturi.StateCompleted)
	final := tasks.ImportCarry{Next: 7, Imported: 5, Skipped: 2, Pages: 3}
	// The carry the completed job keeps has the final counts, those of the import.
	var carry tasks.ImportCarry
	if err := json.Unmarshal(j.Carry, &carry); err != nil || carry != final {
		t.Fatalf("completed job's carry %s = %+v (%v), want %+v", j.Carry, carry, err, final)
	}
	var events []venturi.Event
	var checkpoints []tasks.ImportCarry
	for _, e := range j.Journal {
		var c tasks.ImportCarry
		if err := json.Unmarshal(e.Attachment, &c); err != nil {
			t.Fatalf("attachment %s: %v", e.Attachment, err)
		}
		events, checkpoints = append(events, e.Event), append(checkpoints, c)
	}
	if !slices.Equal(events, []venturi.Event{venturi.EventPaused, venturi.EventPaused, venturi.EventPaused, venturi.EventCompleted}) ||
		!slices.Equal(checkpoints, []tasks.ImportCarry{{Next: 3, Imported: 2, Skipped: 1, Pages: 1}, {Next: 6, Imported: 4, Skipped: 2, Pages: 2}, final, final}) {
		t.Fatalf("journal %v with checkpoints %+v, want three pages then the closing run", events, checkpoints)
	}
	var n, skipped int
	var status string
	if err := b.pool.QueryRow(ctx, "SELECT imported, skipped, status FROM bookmark_import WHERE id = $1", imp).Scan(&n, &skipped, &status); err != nil {
		t.Fatal(err)
	}
	if n != carry.Imported || skipped != carry.Skipped || status != "done" {
		t.Fatalf("import = %d imported, %d skipped, %s; want the carry's %d and %d, done", n, skipped, status, carry.Imported, carry.Skipped)
	}
	// The finished import asked for its tag to be recounted (the rebuild may have run by now).
	venturitest.RequireEnqueued(t, b.pool, func(r tasks.RebuildTagIndex) bool {
		return slices.Equal(r.Tags, []string{"imported"})
	}, venturitest.WithAnyState())
	var fetched int
	deadline := time.Now().Add(15 * time.Second)
	for fetched != 5 {
		if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM bookmark WHERE import_id = $1 AND fetch_status = 'fetched' AND tags = '{imported}'", imp).Scan(&fetched); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 5 imported bookmarks fetched", fetched)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
		}
	}
}

func TestRebuildTagIndexMergesBursts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// A burst of delayed rebuilds merges into one pending job with the union of the tags.
	var first venturi.Result
	for i, tags := range [][]string{{"go"}, {"db", "go"}, {"web"}} {
		res, err := b.queue.Enqueue(ctx, tasks.NewRebuildTagIndex(tags...), venturi.After(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res
		} else if res.ID != first.ID || res.Action != venturi.ActionMerged {
			t.Fatalf("enqueue %d = %+v, want merged into %s", i, res, first.ID)
		}
	}
	j := venturitest.RequireEnqueued(t, b.pool, func(p tasks.RebuildTagIndex) bool {
		return reflect.DeepEqual(p.Tags, []string{"db", "go", "web"}) && p.Requests == 3
	})
	var c tasks.TagIndexCarry
	if err := json.Unmarshal(j.Carry, &c); err != nil || j.ID != first.ID || c.Merged != 2 {
		t.Fatalf("merged job %s carry %+v (%v), want %s with two merges", j.ID, c, err, first.ID)
	}
	// Running a rebuild recounts the index (of bookmarks already fetched: the table's
	// trigger enqueues nothing for them).
	for _, u := range []string{"https://x/", "https://y/"} {
		if _, err := b.pool.Exec(ctx, "INSERT INTO bookmark (id, url, tags, fetch_status) VALUES ($1, $2, '{go,db}', 'fetched')", uuidOf(ulid.Make()), u); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.pool.Exec(ctx, "INSERT INTO tag_index (tag, bookmark_count) VALUES ('stale', 7)"); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	res, err := b.queue.Enqueue(ctx, tasks.RebuildTagIndex{All: true, Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	b.waitJob(t, res.ID, venturi.StateCompleted)
	rows, _ := b.pool.Query(ctx, "SELECT tag || '=' || bookmark_count FROM tag_index ORDER BY tag")
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !reflect.DeepEqual(got, []string{"db=2", "go=2"}) {
		t.Fatalf("tag index = %v (%v)", got, err)
	}
}

// TestRegistrationsSucceedOnAFreshWorker: registering a handler function checks the
// payload's kind and that the carry type of its Merge method is the handler's carry type,
// so every kind registering once on a fresh worker is the whole check.
func TestRegistrationsSucceedOnAFreshWorker(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://registration.invalid/none")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg) // connects only when used
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	w, err := venturi.NewWorker(pool, &App{}, venturi.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range Registrations() {
		if err := r(w); err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
	}
	if err := RegisterFetchBookmark(w); err == nil {
		t.Fatal("a kind registered twice on one worker")
	}
}

// TestFetchBookmarkHonoursRetryAfter runs the real fetcher against a loopback server: a
// 429 or 503 with Retry-After retries after the wait it asks for, at most MaxRetryAfter;
// without the header the retry takes the backoff delay.
func TestFetchBookmarkHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		first := hits[r.URL.Path] == 1
		mu.Unlock()
		if first {
			switch r.URL.Path {
			case "/limited":
				w.Header().Set("Retry-After", "7200")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			case "/dated":
				w.Header().Set("Retry-After", time.Now().Add(30*time.Minute).UTC().Format(http.TimeFormat))
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			case "/busy":
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			case "/plain":
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<title>Up</title>"))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	b.app.Fetcher = fetch.New(fetch.Config{AllowLoopbackPort: uint16(port), Timeout: 5 * time.Second})
	b.start(t)

	// Waits of an hour or more leave the job scheduled after one failed run.
	for path, want := range map[string]struct{ min, max time.Duration }{
		"/limited": {MaxRetryAfter, MaxRetryAfter}, // 2h asked, capped
		"/dated":   {29 * time.Minute, 30 * time.Minute},
	} {
		id, job := b.bookmark(t, srv.URL+path)
		j := b.waitJob(t, job, venturi.StateScheduled)
		if j.Failures != 1 || len(j.Journal) != 1 || j.Journal[0].Event != venturi.EventFailed {
			t.Fatalf("%s: job %+v journal %+v", path, j, j.Journal)
		}
		if d := j.Journal[0].ResumeIn; d < want.min || d > want.max {
			t.Fatalf("%s: retry in %v, want %v..%v", path, d, want.min, want.max)
		}
		if left := time.Until(j.RunAt); left < want.min-time.Minute || left > want.max {
			t.Fatalf("%s: run_at in %v, want about %v", path, left, want.max)
		}
		var att FetchAttachment
		if err := json.Unmarshal(j.Journal[0].Attachment, &att); err != nil || att.RetryAfter == "" {
			t.Fatalf("%s: attachment %+v (%v), want the Retry-After wait", path, att, err)
		}
		if status, _, errText, attempts := b.row(t, id); status == "failed" || attempts != 1 || errText == "" {
			t.Fatalf("%s: bookmark %s %q attempts %d", path, status, errText, attempts)
		}
	}

	// A short wait is honoured and the retry succeeds; without the header the backoff
	// (a millisecond here) applies.
	for path, want := range map[string]struct{ min, max time.Duration }{
		"/busy":  {time.Second, time.Second},
		"/plain": {0, 500 * time.Millisecond},
	} {
		id, job := b.bookmark(t, srv.URL+path)
		j := b.waitJob(t, job, venturi.StateCompleted)
		if len(j.Journal) != 2 || j.Journal[0].Event != venturi.EventFailed {
			t.Fatalf("%s: journal %+v", path, j.Journal)
		}
		if d := j.Journal[0].ResumeIn; d < want.min || d > want.max {
			t.Fatalf("%s: retry in %v, want %v..%v", path, d, want.min, want.max)
		}
		if status, title, _, attempts := b.row(t, id); status != "fetched" || title != "Up" || attempts != 2 {
			t.Fatalf("%s: bookmark %s %q attempts %d", path, status, title, attempts)
		}
	}
}

// syncBuffer is a log destination the worker's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFetchFailuresShowCodesNotAddresses: a name that does not resolve and a refused
// connection, through the real fetcher, leave a reason code on the bookmark and in every
// journal note, and no address (the resolver's, the dialled one) anywhere users look. The
// raw error goes to the worker's log, with the job ID.
func TestFetchFailuresShowCodesNotAddresses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refusing := fetchtest.RefusingPort(t)
	b.app.Fetcher = fetch.New(fetch.Config{Resolver: fetchtest.NXDomainResolver(t), AllowLoopbackPort: refusing})
	var logs syncBuffer
	b.app.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	b.start(t)
	for _, tt := range []struct {
		name, url, code string
		state           venturi.State // an unknown name is a verdict on the page; a refused connection is the host's trouble
		notes           []string      // the journal, run by run (MaxFetchAttempts is 3)
		raw             string        // in the log line only
	}{
		{"unknown name", "http://nohost.fetch.test/", fetch.ReasonDNS, venturi.StateCompleted,
			[]string{"fetch failed: dns"}, "lookup nohost.fetch.test"},
		{"connection refused", fmt.Sprintf("http://127.0.0.1:%d/", refusing), fetch.ReasonConnect, venturi.StateDead,
			[]string{"fetch failed: connect", "fetch failed: connect", "giving up after 3 attempts: fetch failed: connect"},
			fmt.Sprintf("127.0.0.1:%d: connect: connection refused", refusing)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			id, job := b.bookmark(t, tt.url)
			j := b.waitJob(t, job, tt.state)
			var code string
			var httpStatus *int32
			if err := b.pool.QueryRow(context.Background(), "SELECT fetch_status, fetch_error, http_status FROM bookmark WHERE id = $1",
				uuidOf(id)).Scan(new(string), &code, &httpStatus); err != nil {
				t.Fatal(err)
			}
			if code != tt.code || httpStatus != nil {
				t.Fatalf("bookmark fetch_error %q http_status %v, want %q and none", code, httpStatus, tt.code)
			}
			var notes []string
			for _, e := range j.Journal {
				notes = append(notes, e.Note)
				var att FetchAttachment
				if err := json.Unmarshal(e.Attachment, &att); err != nil || att.Reason != tt.code {
					t.Fatalf("attachment %s (%v), want reason %q", e.Attachment, err, tt.code)
				}
			}
			if !slices.Equal(notes, tt.notes) {
				t.Fatalf("journal notes %q, want %q", notes, tt.notes)
			}
			// The detail is in the log, on a line that names the job.
			line := ""
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, job.String()) && strings.Contains(l, tt.raw) {
					line = l
				}
			}
			if line == "" {
				t.Fatalf("no log line with job %s and %q:\n%s", job, tt.raw, logs.String())
			}
		})
	}
}
