package handlers

// Bad inputs that reach the worker's jobs, and the answer to each. The API's table is
// bookmarks-api/internal/httpapi/bad_input_test.go; the fetcher's, with the guard's check
// for each address, is ../fetch/bad_input_test.go.
//
//	row                                              answer
//	unknown task kind inserted into venturi_job      stays available: never claimed, runs 0,
//	                                                 empty journal, while jobs behind it run
//	                                                 (also venturi's TestUnknownKindIsNeverClaimed)
//	import_bookmarks carry {"next":"five"}           dead after one run, journal note "decode carry"
//	import_bookmarks carry "v0-checkpoint"           dead, "decode carry" (a carry that no longer
//	                                                 decodes; venturi's
//	                                                 TestUndecodablePayloadOrCarryGoesDead)
//	fetch_bookmark payload {"bookmark_id":5}         dead, "decode payload"
//	fetch_bookmark payload of a non-ULID bookmark id dead, "bad bookmark id" (also one run through
//	                                                 venturitest.RunFunc, without a database)
//	import_bookmarks payload of a non-ULID import id dead, "bad import id" (RunFunc)
//	fetch_imported_bookmarks, summarize_import       dead, "bad import id" (RunFunc)
//	  payload of a non-ULID import id
//	fetch of http://[::1]/ (the API accepts it)      completed with the note "fetch failed:
//	                                                 blocked_address" (a verdict on the page, not
//	                                                 the host's failure: see handleFetchBookmark);
//	                                                 bookmark failed, fetch_error "blocked_address"
//	                                                 (refused by the dial-time guard)
//	fetch of http://2130706433/ (the API accepts it) completed; bookmark failed, "blocked_address"
//	fetch of file:///etc/passwd, gopher://...,       completed; bookmark failed, "bad_url" (the API
//	  https://u:p@a.example/                         refuses these with 422; a stored payload
//	                                                 cannot get past the fetcher either)
//	import of those six URLs                         [::1] imported and its fetch ends "blocked_address";
//	                                                 the other five skipped (the fetcher would
//	                                                 not try them); import done, 1 imported, 5
//	                                                 skipped; no rebuild_tag_index (no tags)
//
// The fetch rows use the real fetcher with production defaults: the only connection
// attempted is to [::1], refused by the guard before connect.

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturitest"
)

// insertJob writes a job row directly, as a buggy or older producer might have.
func (b *testBundle) insertJob(t *testing.T, kind, payload string, carry any) ulid.ULID {
	t.Helper()
	id := ulid.Make()
	if _, err := b.pool.Exec(context.Background(), `INSERT INTO venturi_job (id, kind, state, priority, payload, carry, run_at)
		VALUES ($1, $2, 'available', 10, $3::jsonb, $4::jsonb, now() - interval '1 hour')`,
		uuidOf(id), kind, payload, carry); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestBadInputJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	unknown := b.insertJob(t, "bookmarks_v0_export", `{"anything": true}`, nil)
	dead := []struct {
		name string
		id   ulid.ULID
		note string
	}{
		{"carry of the wrong field type", b.insertJob(t, tasks.KindImportBookmarks, `{"import_id":"`+ulid.Make().String()+`"}`, `{"next":"five"}`), "decode carry"},
		{"carry of an old format", b.insertJob(t, tasks.KindImportBookmarks, `{"import_id":"`+ulid.Make().String()+`"}`, `"v0-checkpoint"`), "decode carry"},
		{"payload of the wrong type", b.insertJob(t, tasks.KindFetchBookmark, `{"bookmark_id":5}`, nil), "decode payload"},
		{"bookmark id not a ULID", b.insertJob(t, tasks.KindFetchBookmark, `{"bookmark_id":"../../etc","url":"https://a.example/"}`, nil), "bad bookmark id"},
	}
	b.start(t)
	for _, d := range dead {
		j := b.waitJob(t, d.id, venturi.StateDead)
		if len(j.Journal) != 1 || !strings.Contains(j.Journal[0].Note, d.note) {
			t.Fatalf("%s: journal %+v, want one entry noting %q", d.name, j.Journal, d.note)
		}
	}
	// A job enqueued after the unknown one runs; the unknown one is still untouched.
	_, job := b.bookmark(t, "https://after.example/")
	b.waitJob(t, job, venturi.StateCompleted)
	j, err := b.queue.Job(context.Background(), unknown)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != venturi.StateAvailable || j.RunCount != 0 || len(j.Journal) != 0 || j.AttemptedAt != nil {
		t.Fatalf("the job of an unknown kind was touched: %+v", j)
	}
}

func TestBadInputURLsReachingTheFetcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.app.Fetcher = fetch.New(fetch.Config{}) // the real fetcher, production defaults
	b.start(t)
	for _, tt := range []struct{ url, code string }{
		{"http://[::1]/", "blocked_address"},
		{"http://2130706433/", "blocked_address"},
		{"http://0x7f.1/", "blocked_address"},
		{"file:///etc/passwd", "bad_url"},
		{"gopher://127.0.0.1:70/_GET", "bad_url"},
		{"https://u:p@a.example/", "bad_url"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			id, job := b.bookmark(t, tt.url)
			// A verdict on the page: the job completes, the bookmark is failed.
			j := b.waitJob(t, job, venturi.StateCompleted)
			status, _, errText, _ := b.row(t, id)
			if status != "failed" || errText != tt.code || j.Journal[len(j.Journal)-1].Note != "fetch failed: "+tt.code {
				t.Fatalf("bookmark %s %q, want failed %q; journal %+v", status, errText, tt.code, j.Journal)
			}
		})
	}

	// The same URLs in an import.
	ctx := context.Background()
	task, job := b.newImportJob(t, 0, nil, "http://[::1]/", "http://2130706433/", "http://0x7f.1/", "file:///etc/passwd",
		"gopher://127.0.0.1:70/_GET", "https://u:p@a.example/")
	imp, _ := parseID(task.ImportID)
	b.waitJob(t, job, venturi.StateCompleted)
	var imported, skipped int
	var status string
	if err := b.pool.QueryRow(ctx, "SELECT imported, skipped, status FROM bookmark_import WHERE id = $1", imp).
		Scan(&imported, &skipped, &status); err != nil {
		t.Fatal(err)
	}
	if imported != 1 || skipped != 5 || status != "done" {
		t.Fatalf("import: %d imported, %d skipped, %s; want 1, 5, done", imported, skipped, status)
	}
	// An import without tags has no tag to recount.
	venturitest.RequireNotEnqueued[tasks.RebuildTagIndex](t, b.pool, nil, venturitest.WithAnyState())
	var fetchJob pgtype.UUID
	var url string
	if err := b.pool.QueryRow(ctx, "SELECT fetch_job_id, url FROM bookmark WHERE import_id = $1", imp).
		Scan(&fetchJob, &url); err != nil {
		t.Fatal(err)
	}
	if url != "http://[::1]/" {
		t.Fatalf("imported %q", url)
	}
	if j := b.waitJob(t, ulid.ULID(fetchJob.Bytes), venturi.StateCompleted); j.Journal[len(j.Journal)-1].Note != "fetch failed: blocked_address" {
		t.Fatalf("imported [::1] fetch: journal %+v", j.Journal)
	}
}

// TestBadIDsKillTheJobOnTheFirstRun runs the handlers once, without a worker or a
// database: an ID that is not a ULID is refused before any query.
func TestBadIDsKillTheJobOnTheFirstRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	app := &App{} // no pool, store or fetcher: none may be used
	fb := venturitest.RunFunc(ctx, handleFetchBookmark, tasks.FetchBookmark{BookmarkID: "../../etc", URL: "https://a.example/"},
		app, venturitest.RunOptions[tasks.FetchCarry]{})
	if !fb.IsPermanent() || !strings.HasPrefix(fb.Note(), `bad bookmark id "../../etc"`) {
		t.Fatalf("fetch of a non-ULID bookmark: %s %q, want dead with bad bookmark id", fb.Event(), fb.Note())
	}
	ib := venturitest.RunFunc(ctx, handleImportBookmarks, tasks.ImportBookmarks{ImportID: "01J-not-a-ulid"},
		app, venturitest.RunOptions[tasks.ImportCarry]{})
	if !ib.IsPermanent() || !strings.HasPrefix(ib.Note(), `bad import id "01J-not-a-ulid"`) {
		t.Fatalf("import with a non-ULID id: %s %q, want dead with bad import id", ib.Event(), ib.Note())
	}
	// The other nodes of an import's workflow.
	fn := venturitest.RunFunc(ctx, handleFetchImportedBookmarks, tasks.FetchImportedBookmarks{ImportID: "01J-not-a-ulid"},
		app, venturitest.RunOptions[struct{}]{})
	sn := venturitest.RunFunc(ctx, handleSummarizeImport, tasks.SummarizeImport{ImportID: "01J-not-a-ulid"},
		app, venturitest.RunOptions[struct{}]{})
	for name, res := range map[string]venturitest.Result[struct{}]{"fetch node": fn, "summary node": sn} {
		if !res.IsPermanent() || !strings.HasPrefix(res.Note(), `bad import id "01J-not-a-ulid"`) {
			t.Fatalf("%s with a non-ULID import id: %s %q, want dead with bad import id", name, res.Event(), res.Note())
		}
	}
}
