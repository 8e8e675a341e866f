package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// ---- The task: identity and enqueue-time policy (producer side) ----

// FetchBookmark fetches a bookmarked page in the background.
type FetchBookmark struct {
	BookmarkID ulid.ULID `json:"bookmark_id"`
	URL        string    `json:"url"`
}

// Kind names the task; it is stored with the payload and routes the job to its handler.
func (FetchBookmark) Kind() string { return "fetch_bookmark" }

// DedupKey allows at most one pending fetch per bookmark...
func (f FetchBookmark) DedupKey() venturi.DedupKey { return venturi.KeyOf(f.BookmarkID) }

// Merge lets a newer enqueue replace the pending one (also the default without a Merge method).
func (f FetchBookmark) Merge(existing venturi.Pending[FetchBookmark, struct{}]) venturi.Merge[FetchBookmark, struct{}] {
	return existing.Replace()
}

// ---- The execution side (worker binary) ----

// App is the worker's shared state: the dependencies every handler receives.
type App struct {
	HTTP *http.Client
}

// Handle fetches the page. Its signature tells Register the state type (App) and the
// carry type (struct{}: a fetch keeps nothing between runs).
func (f FetchBookmark) Handle(ctx context.Context, run *venturi.Run[struct{}], app App) (venturi.Outcome, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL, nil)
	if err != nil {
		return venturi.Outcome{}, venturi.Permanent(err) // a URL we can never request
	}
	resp, err := app.HTTP.Do(req)
	if err != nil {
		return venturi.Outcome{}, err // retried with backoff
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		return venturi.Outcome{}, venturi.Permanent(errors.New("resource gone")) // dead
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 5<<20))
	if err != nil {
		return venturi.Outcome{}, err
	}
	_ = run.SetAttachment(map[string]any{"bytes": len(body), "status": resp.StatusCode})
	return venturi.CompletedWith(fmt.Sprintf("fetched %d bytes", len(body))), nil
}

// A bookmark service fetches pages in the background: define the task, register it on a
// worker, enqueue, and read the job's state and journal back.
func ExampleRegister() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	// A stand-in for the web: /gone answers 410, every other page is "<p>hello</p>".
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusGone)
			return
		}
		_, _ = io.WriteString(w, "<p>hello</p>")
	}))
	defer web.Close()

	// Producer: it knows only the Task side of FetchBookmark.
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	id := ulid.Make()
	first, err := q.Enqueue(ctx, FetchBookmark{BookmarkID: id, URL: web.URL + "/draft"})
	if err != nil {
		log.Fatal(err)
	}
	// A second enqueue for the same bookmark before a worker ran the first replaces it.
	second, err := q.Enqueue(ctx, FetchBookmark{BookmarkID: id, URL: web.URL + "/article"})
	if err != nil {
		log.Fatal(err)
	}
	gone, err := q.Enqueue(ctx, FetchBookmark{BookmarkID: ulid.Make(), URL: web.URL + "/gone"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Action, second.Action, gone.Action, "same job:", first.ID == second.ID)

	// Worker: register the task type, start, and stop gracefully at the end.
	w, err := venturi.NewWorker(pool, App{HTTP: web.Client()}, venturi.Config{
		PollInterval: 10 * time.Millisecond,         // quick for the example; default 1s
		Logger:       slog.New(slog.DiscardHandler), // keep the example's output clean
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[FetchBookmark](w) // infers App and the carry type from Handle
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	for _, res := range []venturi.Result{second, gone} {
		job := awaitFinished(q, res.ID) // polls q.Job(ctx, res.ID) until it completes or dies
		fmt.Println(job.State)
		for _, e := range job.Journal {
			switch e.Event {
			case venturi.EventMerged:
				fmt.Printf("  merged: %s\n", e.Merge)
			default:
				fmt.Printf("  run %d %s: %s %s\n", e.Run, e.Event, e.Note, e.Attachment)
			}
		}
	}
	// Output:
	// inserted replaced inserted same job: true
	// completed
	//   merged: replace
	//   run 1 completed: fetched 12 bytes {"bytes": 12, "status": 200}
	// dead
	//   run 1 dead: resource gone
}

// ---- A task type from a package the worker does not own ----

// Thumbnail stands for a task type declared in a producer package: the worker cannot add
// a Handle method to it, so it registers a function instead.
type Thumbnail struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

// Kind names the task.
func (Thumbnail) Kind() string { return "thumbnail" }

// RegisterFunc registers a handler function for a task type that has no Handle method.
// The type keeps its kind, dedup key and merge.
func ExampleRegisterFunc() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()

	w, err := venturi.NewWorker(pool, App{}, venturi.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegisterFunc(w, func(ctx context.Context, t Thumbnail, run *venturi.Run[struct{}], app App) (venturi.Outcome, error) {
		return venturi.CompletedWith(fmt.Sprintf("%s at %dpx", t.Image, t.Width)), nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, err := q.Enqueue(ctx, Thumbnail{Image: "cat.png", Width: 128})
	if err != nil {
		log.Fatal(err)
	}
	job := awaitFinished(q, res.ID)
	fmt.Println(job.State)
	printJournal(job)
	// Output:
	// completed
	//   run 1 completed: cat.png at 128px
}
