package handlers

// Handler logic one run at a time, through venturitest.RunFunc: no worker runs, so each
// test says which run it is (RunOptions) and reads the decision off the Result. The
// handlers' own tables are real (setup's schema); the fetcher is the fake.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturitest"
)

// runFetch runs the fetch of bookmark id as run number failures+1 of job.
func (b *testBundle) runFetch(id, job ulid.ULID, url string, opts venturitest.RunOptions[tasks.FetchCarry]) venturitest.Result[tasks.FetchCarry] {
	opts.ID = job
	return venturitest.RunFunc(context.Background(), handleFetchBookmark, tasks.FetchBookmark{BookmarkID: id.String(), URL: url}, b.app, opts)
}

// TestFetchBookmarkFailureDecisions: how a failed fetch retries, honours Retry-After
// (429 and 503 only, capped at MaxRetryAfter) or gives up, and what the bookmark records.
func TestFetchBookmarkFailureDecisions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, tt := range []struct {
		name     string
		fe       *fetch.Error
		failures int // earlier failed runs; MaxFetchAttempts is 3
		event    venturi.Event
		retryIn  time.Duration // 0: the worker's backoff
		note     string
	}{
		{"429 asks for two hours: capped", &fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 429, RetryAfter: 2 * time.Hour}, 0, venturi.EventFailed, MaxRetryAfter, "fetch failed: http_status 429"},
		{"503 asks for a second", &fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 503, RetryAfter: time.Second}, 1, venturi.EventFailed, time.Second, "fetch failed: http_status 503"},
		{"500 with Retry-After: backoff", &fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 500, RetryAfter: 5 * time.Second}, 0, venturi.EventFailed, 0, "fetch failed: http_status 500"},
		{"503 without Retry-After: backoff", &fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 503}, 0, venturi.EventFailed, 0, "fetch failed: http_status 503"},
		{"410 is a verdict: the job completes", &fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 410, Permanent: true}, 0, venturi.EventCompleted, 0, "fetch failed: http_status 410"},
		{"a refused address is a verdict", &fetch.Error{Reason: fetch.ReasonBlocked, Permanent: true, Err: errors.New("prohibited IP address: 10.0.0.1")}, 1, venturi.EventCompleted, 0, "fetch failed: blocked_address"},
		{"not HTML is a verdict", &fetch.Error{Reason: fetch.ReasonBadContent, Status: 200, Permanent: true}, 0, venturi.EventCompleted, 0, "fetch failed: bad_content"},
		{"the last attempt gives up", &fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 500}, 2, venturi.EventDead, 0, "giving up after 3 attempts: fetch failed: http_status 500"},
		{"the last attempt ignores Retry-After", &fetch.Error{Reason: fetch.ReasonHTTPStatus, Status: 429, RetryAfter: time.Minute}, 2, venturi.EventDead, 0, "giving up after 3 attempts: fetch failed: http_status 429"},
		{"a timeout's detail stays out", &fetch.Error{Reason: fetch.ReasonTimeout, Err: errors.New("dial tcp 10.1.2.3:443: i/o timeout")}, 0, venturi.EventFailed, 0, "fetch failed: timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url := fmt.Sprintf("https://r%d.example/", i)
			b.fetcher.script[url] = []func() (*fetch.Result, error){fail(tt.fe)}
			id, job := b.bookmark(t, url)
			res := b.runFetch(id, job, url, venturitest.RunOptions[tasks.FetchCarry]{RunCount: tt.failures + 1, Failures: tt.failures})
			if res.Event() != tt.event || res.Note() != tt.note {
				t.Fatalf("%s %q, want %s %q", res.Event(), res.Note(), tt.event, tt.note)
			}
			if d, ok := res.RetryIn(); d != tt.retryIn || ok != (tt.retryIn > 0) {
				t.Fatalf("RetryIn = %v, %v; want %v", d, ok, tt.retryIn)
			}
			// The attachment records a Retry-After that a 429 or 503 asked for, also on the
			// last attempt, where it delays nothing.
			asked := tt.fe.RetryAfter > 0 && (tt.fe.Status == 429 || tt.fe.Status == 503)
			var att FetchAttachment
			if err := res.DecodeAttachment(&att); err != nil || att.URL != url || att.Reason != tt.fe.Reason ||
				att.Status != tt.fe.Status || (att.RetryAfter != "") != asked {
				t.Fatalf("attachment %+v (%v)", att, err)
			}
			// A verdict on the page completes the job in the transaction that marks the
			// bookmark failed, returning no error: the host's breaker does not count it.
			if verdict := tt.fe.Permanent; verdict != (res.Err == nil) || verdict != res.CompletedTx {
				t.Fatalf("error %v, completedTx %v; want an error exactly for the host's trouble", res.Err, res.CompletedTx)
			}
			wantStatus := "pending"
			if tt.event == venturi.EventDead || tt.event == venturi.EventCompleted {
				wantStatus = "failed"
			}
			if status, _, errText, attempts := b.row(t, id); status != wantStatus || errText != tt.fe.Reason || attempts != 1 {
				t.Fatalf("bookmark %s %q attempts %d, want %s %q 1", status, errText, attempts, wantStatus, tt.fe.Reason)
			}
		})
	}
}

// TestFetchBookmarkCommitsWithItsJob: the result and the job's completion commit in one
// transaction, so a run that lost its job writes nothing; a superseded job fetches nothing.
func TestFetchBookmarkCommitsWithItsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fetcher.script["https://ok.example/"] = []func() (*fetch.Result, error){ok("Page")}
	id, job := b.bookmark(t, "https://ok.example/")
	res := b.runFetch(id, job, "https://ok.example/", venturitest.RunOptions[tasks.FetchCarry]{})
	if res.Err != nil || !res.CompletedTx || res.Note() != "fetched 200, 42 bytes of text/html" {
		t.Fatalf("%s %q completedTx %v, want completed in the handler's transaction", res.Event(), res.Note(), res.CompletedTx)
	}
	if status, title, _, attempts := b.row(t, id); status != "fetched" || title != "Page" || attempts != 1 {
		t.Fatalf("bookmark %s %q attempts %d", status, title, attempts)
	}

	id, job = b.bookmark(t, "https://lost.example/")
	res = b.runFetch(id, job, "https://lost.example/", venturitest.RunOptions[tasks.FetchCarry]{CompleteTxErr: venturi.ErrLeaseLost})
	if !errors.Is(res.Err, venturi.ErrLeaseLost) || res.CompletedTx {
		t.Fatalf("%s %q, want the lease loss", res.Event(), res.Note())
	}
	if status, title, _, attempts := b.row(t, id); status != "pending" || title != "" || attempts != 0 {
		t.Fatalf("a run that lost its job stored its result: bookmark %s %q attempts %d", status, title, attempts)
	}

	b.fetcher.script["https://refetched.example/"] = []func() (*fetch.Result, error){ok("Not fetched")}
	id, _ = b.bookmark(t, "https://refetched.example/")
	res = b.runFetch(id, ulid.Make(), "https://refetched.example/", venturitest.RunOptions[tasks.FetchCarry]{})
	if res.Event() != venturi.EventCompleted || res.Note() != "superseded by a newer fetch job" || b.fetcher.calls["https://refetched.example/"] != 0 {
		t.Fatalf("%s %q after %d fetches, want superseded without a fetch", res.Event(), res.Note(), b.fetcher.calls["https://refetched.example/"])
	}
}

// TestImportBookmarksOnePageARun runs an import page by page: each run commits its
// bookmarks, their fetch jobs and the checkpoint together, and the last asks for a tag
// recount.
func TestImportBookmarksOnePageARun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	urls := []string{"https://1.example/", "javascript:alert(1)", "https://3.example/", "https://4.example/", "https://5.example/"}
	task, job := b.newImportJob(t, 2, []string{"go"}, urls...)
	fetchOf := func(url string) func(tasks.FetchBookmark) bool {
		return func(f tasks.FetchBookmark) bool { return f.URL == url }
	}
	opts := venturitest.RunOptions[tasks.ImportCarry]{ID: job}
	res := venturitest.RunFunc(ctx, handleImportBookmarks, task, b.app, opts)
	if res.Event() != venturi.EventPaused || !res.CompletedTx || res.Carry != (tasks.ImportCarry{Next: 2, Imported: 1, Skipped: 1, Pages: 1}) {
		t.Fatalf("page 1: %s %q carry %+v completedTx %v", res.Event(), res.Note(), res.Carry, res.CompletedTx)
	}
	venturitest.RequireEnqueued(t, b.pool, fetchOf(urls[0]))
	venturitest.RequireNotEnqueued(t, b.pool, fetchOf(urls[2]))
	venturitest.RequireNotEnqueued[tasks.RebuildTagIndex](t, b.pool, nil)

	// A page whose commit is refused leaves nothing behind and keeps the checkpoint.
	opts.Carry, opts.RunCount = res.Carry, 2
	lost := opts
	lost.CompleteTxErr = venturi.ErrLeaseLost
	if res := venturitest.RunFunc(ctx, handleImportBookmarks, task, b.app, lost); !errors.Is(res.Err, venturi.ErrLeaseLost) || res.Carry != opts.Carry {
		t.Fatalf("lost page: %s %q carry %+v, want the lease loss and carry %+v", res.Event(), res.Note(), res.Carry, opts.Carry)
	}
	venturitest.RequireNotEnqueued(t, b.pool, fetchOf(urls[2]))

	res = venturitest.RunFunc(ctx, handleImportBookmarks, task, b.app, opts)
	if res.Event() != venturi.EventPaused || res.Carry != (tasks.ImportCarry{Next: 4, Imported: 3, Skipped: 1, Pages: 2}) {
		t.Fatalf("page 2: %s %q carry %+v", res.Event(), res.Note(), res.Carry)
	}
	opts.Carry, opts.RunCount = res.Carry, 3
	res = venturitest.RunFunc(ctx, handleImportBookmarks, task, b.app, opts)
	final := tasks.ImportCarry{Next: 5, Imported: 4, Skipped: 1, Pages: 3}
	if res.Event() != venturi.EventPaused || res.Carry != final {
		t.Fatalf("page 3 (the last) must pause, storing the final carry: %s %q carry %+v", res.Event(), res.Note(), res.Carry)
	}
	venturitest.RequireNotEnqueued[tasks.RebuildTagIndex](t, b.pool, nil)
	// The run after the last page finds nothing left and completes; the carry it leaves is
	// the one the last page's pause stored.
	opts.Carry, opts.RunCount = res.Carry, 4
	res = venturitest.RunFunc(ctx, handleImportBookmarks, task, b.app, opts)
	if res.Event() != venturi.EventCompleted || !res.CompletedTx || res.Note() != "imported 4 of 5 items in 3 pages (1 skipped)" || res.Carry != final {
		t.Fatalf("closing run: %s %q carry %+v", res.Event(), res.Note(), res.Carry)
	}

	// Every valid URL has its bookmark and its fetch job; the invalid one has neither.
	for _, u := range slices.Delete(slices.Clone(urls), 1, 2) {
		j := venturitest.RequireEnqueued(t, b.pool, fetchOf(u))
		var fb tasks.FetchBookmark
		if err := json.Unmarshal(j.Payload, &fb); err != nil {
			t.Fatal(err)
		}
		id, err := parseID(fb.BookmarkID)
		if err != nil {
			t.Fatal(err)
		}
		var tags []string
		var fetchJob pgtype.UUID
		if err := b.pool.QueryRow(ctx, "SELECT tags, fetch_job_id FROM bookmark WHERE id = $1", id).Scan(&tags, &fetchJob); err != nil {
			t.Fatalf("bookmark of %s: %v", u, err)
		}
		if fetchJob != uuidOf(j.ID) || !slices.Equal(tags, []string{"go"}) {
			t.Fatalf("bookmark of %s: fetch job %s tags %q, want %s [go]", u, ulid.ULID(fetchJob.Bytes), tags, j.ID)
		}
	}
	venturitest.RequireNotEnqueued(t, b.pool, fetchOf(urls[1]), venturitest.WithAnyState())
	venturitest.RequireEnqueued(t, b.pool, func(r tasks.RebuildTagIndex) bool { return slices.Equal(r.Tags, []string{"go"}) })
}

// TestImportStopsBeforeAPageWhenAskedTo: a run that starts after its Run.Shutdown closed (a
// cancel, or the worker's shutdown) imports nothing and pauses with its checkpoint as the
// attachment, so the journal keeps where the import stopped.
func TestImportStopsBeforeAPageWhenAskedTo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	task, job := b.newImportJob(t, 2, nil, "https://1.example/", "https://2.example/", "https://3.example/")
	checkpoint := tasks.ImportCarry{Next: 2, Imported: 2, Pages: 1}
	res := venturitest.RunFunc(ctx, handleImportBookmarks, task, b.app,
		venturitest.RunOptions[tasks.ImportCarry]{ID: job, RunCount: 2, Carry: checkpoint, ShuttingDown: true})
	var att tasks.ImportCarry
	if err := res.DecodeAttachment(&att); err != nil || res.Event() != venturi.EventPaused || res.Outcome.ResumeIn() != 0 ||
		res.Note() != "stopped before page 2: 2/3 items, 2 imported, 0 skipped" || att != checkpoint || res.Carry != checkpoint {
		t.Fatalf("%s %q, attachment %+v (%v), carry %+v", res.Event(), res.Note(), att, err, res.Carry)
	}
	venturitest.RequireNotEnqueued[tasks.FetchBookmark](t, b.pool, nil)
}
