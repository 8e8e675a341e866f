package handlers

// The integration tests' fixture: a migrated schema, the App on it with a scripted
// fetcher, a worker over every registration, and helpers that create bookmarks and imports
// as the API does.

import (
	"context"
	"io"
	"log/slog"
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

// start runs a worker over every registration, serving both queues with four handlers
// each, as the worker module does (with more handlers).
func (b *testBundle) start(t *testing.T) { b.startQueues(t, 4, 4) }

// startQueues is start with the given handlers for the default and the imports queue.
func (b *testBundle) startQueues(t *testing.T, interactive, imports int) {
	t.Helper()
	b.startWith(t, interactive, imports, Registrations())
}

// startWith is startQueues with the given registrations only.
func (b *testBundle) startWith(t *testing.T, interactive, imports int, regs []Registration) {
	t.Helper()
	w, err := venturi.NewWorker(b.pool, b.app, venturi.Config{
		Queues: Queues(interactive, imports), PollInterval: 20 * time.Millisecond, Backoff: venturi.Backoff{Base: time.Millisecond},
		Logger: b.app.Log,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regs {
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

// newImportJob stores an import of urls and enqueues its job in one transaction, as the
// API did before imports were workflows (schema version 7): an import job of its own,
// which enqueues its bookmarks' fetches page by page and asks for the tag recount at its
// end. The worker keeps running such imports. The job is pending, for a started worker or
// for venturitest.RunFunc. newImportWorkflow makes an import as the API does now.
func (b *testBundle) newImportJob(t *testing.T, pageSize int, tags []string, urls ...string) (tasks.ImportBookmarks, ulid.ULID) {
	t.Helper()
	ctx := context.Background()
	task := tasks.ImportBookmarks{ImportID: ulid.Make().String(), PageSize: pageSize}
	imp, err := parseID(task.ImportID)
	if err != nil {
		t.Fatal(err)
	}
	var job ulid.ULID
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		res, err := b.queue.EnqueueTx(ctx, tx, task)
		if err != nil {
			return err
		}
		job = res.ID
		if _, err := tx.Exec(ctx, "INSERT INTO bookmark_import (id, job_id, tags, total) VALUES ($1, $2, $3, $4)",
			imp, uuidOf(job), append([]string{}, tags...), len(urls)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO bookmark_import_item (import_id, position, url)
			SELECT $1, o - 1, u FROM unnest($2::text[]) WITH ORDINALITY AS x(u, o)`, imp, urls)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return task, job
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
