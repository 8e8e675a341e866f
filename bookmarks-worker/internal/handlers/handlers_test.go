package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/bookmarks/sql/dbtest"
	"github.com/venturi-dev/bookmarks/sql/migrations"
	"github.com/venturi-dev/venturi"
)

// fakeFetcher answers from a script per URL; the last answer repeats.
type fakeFetcher struct {
	mu     sync.Mutex
	script map[string][]func() (*fetch.Result, error)
	calls  map[string]int
}

func (f *fakeFetcher) Fetch(_ context.Context, url string) (*fetch.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.script[url]
	if len(s) == 0 {
		return &fetch.Result{Status: 200, FinalURL: url, ContentType: "text/html", Bytes: 10, Title: "T " + url, Text: "text"}, nil
	}
	i := min(f.calls[url], len(s)-1)
	f.calls[url]++
	return s[i]()
}

func ok(title string) func() (*fetch.Result, error) {
	return func() (*fetch.Result, error) {
		return &fetch.Result{Status: 200, FinalURL: "https://final/", ContentType: "text/html", Bytes: 42, Title: title, Text: "body"}, nil
	}
}

func fail(fe *fetch.Error) func() (*fetch.Result, error) {
	return func() (*fetch.Result, error) { return nil, fe }
}

type testBundle struct {
	pool    *pgxpool.Pool
	app     *App
	queue   *venturi.Queue
	fetcher *fakeFetcher
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t, "bmw", 10)
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	ff := &fakeFetcher{script: map[string][]func() (*fetch.Result, error){}, calls: map[string]int{}}
	app := NewApp(pool, ff, slog.New(slog.NewTextHandler(io.Discard, nil)), 3)
	return &testBundle{pool: pool, app: app, queue: app.Queue, fetcher: ff}
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	w, err := venturi.NewWorker(b.pool, b.app, venturi.Config{
		Concurrency: 4, PollInterval: 20 * time.Millisecond, Backoff: venturi.Backoff{Base: time.Millisecond},
		Logger: b.app.Log,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Registrations() {
		if err := r(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

// bookmark creates a bookmark and enqueues its fetch in one transaction, as the API does.
func (b *testBundle) bookmark(t *testing.T, url string) (ulid.ULID, ulid.ULID) {
	t.Helper()
	id := ulid.Make()
	var job ulid.ULID
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		res, err := b.queue.EnqueueTx(context.Background(), tx, tasks.FetchBookmark{BookmarkID: id.String(), URL: url})
		if err != nil {
			return err
		}
		job = res.ID
		return b.app.Store.InsertImportedBookmark(context.Background(), tx, store.InsertImportedBookmarkParams{
			ID: uuidOf(id), Url: url, Tags: []string{}, FetchJobID: uuidOf(job)})
	})
	if err != nil {
		t.Fatal(err)
	}
	return id, job
}

func (b *testBundle) waitJob(t *testing.T, id ulid.ULID, state venturi.State) *venturi.Job {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		j, err := b.queue.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == state {
			return j
		}
		if time.Now().After(deadline) || (j.State == venturi.StateDead && state != venturi.StateDead) {
			t.Fatalf("job %s is %s, want %s; journal %+v", id, j.State, state, j.Journal)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

func (b *testBundle) row(t *testing.T, id ulid.ULID) (status, title, errText string, attempts int) {
	t.Helper()
	err := b.pool.QueryRow(context.Background(),
		"SELECT fetch_status, page_title, fetch_error, fetch_attempts FROM bookmark WHERE id = $1", uuidOf(id)).
		Scan(&status, &title, &errText, &attempts)
	if err != nil {
		t.Fatal(err)
	}
	return
}

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
		fail(&fetch.Error{Reason: fetch.ReasonServerError, Status: 503}),
		fail(&fetch.Error{Reason: fetch.ReasonRateLimited, Status: 429}),
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
	b.fetcher.script["https://gone.example/"] = []func() (*fetch.Result, error){fail(&fetch.Error{Reason: fetch.ReasonGone, Status: 410, Permanent: true})}
	b.fetcher.script["http://10.0.0.1/"] = []func() (*fetch.Result, error){fail(&fetch.Error{Reason: fetch.ReasonBlocked, Permanent: true, Err: errors.New("prohibited IP address")})}
	b.fetcher.script["https://down.example/"] = []func() (*fetch.Result, error){fail(&fetch.Error{Reason: fetch.ReasonServerError, Status: 500})}
	b.start(t)
	for url, want := range map[string]string{
		"https://gone.example/": "gone (HTTP 410)",
		"http://10.0.0.1/":      "blocked: prohibited IP address",
		"https://down.example/": "http_server_error (HTTP 500)", // gives up after MaxFetchAttempts (3)
	} {
		id, job := b.bookmark(t, url)
		j := b.waitJob(t, job, venturi.StateDead)
		status, _, errText, _ := b.row(t, id)
		if status != "failed" || errText != want {
			t.Fatalf("%s: bookmark %s %q, want failed %q; journal %+v", url, status, errText, want, j.Journal)
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
	imp := ulid.Make()
	urls := []string{"https://1.example/", "https://2.example/", "javascript:alert(1)", "https://4.example/",
		"https://5.example/", "ftp://6.example/", "https://7.example/"}
	var job ulid.ULID
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		res, err := b.queue.EnqueueTx(ctx, tx, tasks.ImportBookmarks{ImportID: imp.String(), PageSize: 3})
		if err != nil {
			return err
		}
		job = res.ID
		if _, err := tx.Exec(ctx, "INSERT INTO bookmark_import (id, job_id, tags, total) VALUES ($1, $2, '{imported}', $3)",
			uuidOf(imp), uuidOf(job), len(urls)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO bookmark_import_item (import_id, position, url)
			SELECT $1, o - 1, u FROM unnest($2::text[]) WITH ORDINALITY AS x(u, o)`, uuidOf(imp), urls)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b.start(t)
	j := b.waitJob(t, job, venturi.StateCompleted)
	if j.RunCount != 3 || j.Journal[0].Event != venturi.EventPaused || j.Journal[1].Event != venturi.EventPaused {
		t.Fatalf("want two pauses then completion, journal = %+v", j.Journal)
	}
	var carry tasks.ImportCarry
	if err := json.Unmarshal(j.Journal[1].Attachment, &carry); err != nil || carry.Next != 6 || carry.Pages != 2 {
		t.Fatalf("checkpoint after page 2 = %+v (%v)", carry, err)
	}
	var n, skipped int
	var status string
	if err := b.pool.QueryRow(ctx, "SELECT imported, skipped, status FROM bookmark_import WHERE id = $1", uuidOf(imp)).Scan(&n, &skipped, &status); err != nil {
		t.Fatal(err)
	}
	if n != 5 || skipped != 2 || status != "done" {
		t.Fatalf("import = %d imported, %d skipped, %s", n, skipped, status)
	}
	var fetched int
	deadline := time.Now().Add(15 * time.Second)
	for fetched != 5 {
		if err := b.pool.QueryRow(ctx, "SELECT count(*) FROM bookmark WHERE import_id = $1 AND fetch_status = 'fetched' AND tags = '{imported}'", uuidOf(imp)).Scan(&fetched); err != nil {
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
	j, err := b.queue.Job(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	var p tasks.RebuildTagIndex
	var c tasks.TagIndexCarry
	_ = json.Unmarshal(j.Payload, &p)
	_ = json.Unmarshal(j.Carry, &c)
	if !reflect.DeepEqual(p.Tags, []string{"db", "go", "web"}) || p.Requests != 3 || c.Merged != 2 {
		t.Fatalf("merged job payload %+v carry %+v", p, c)
	}
	// Running a rebuild recounts the index.
	for _, u := range []string{"https://x/", "https://y/"} {
		if _, err := b.pool.Exec(ctx, "INSERT INTO bookmark (id, url, tags) VALUES ($1, $2, '{go,db}')", uuidOf(ulid.Make()), u); err != nil {
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
