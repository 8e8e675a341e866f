package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// ---- The task: identity and enqueue-time policy (producer side) ----

// FetchBookmark fetches a bookmarked page in the background.
type FetchBookmark struct {
	BookmarkID ulid.ULID `json:"bookmark_id"`
	URL        string    `json:"url"`
}

func (FetchBookmark) Kind() string { return "fetch_bookmark" }

func (FetchBookmark) Priority() venturi.Priority { return venturi.PriorityNormal }

// DedupKey allows at most one pending fetch per bookmark.
func (b FetchBookmark) DedupKey() venturi.DedupKey { return venturi.KeyOf(b.BookmarkID) }

// Merge lets a newer enqueue for the same bookmark supersede the pending one.
func (b FetchBookmark) Merge(existing venturi.Pending[FetchBookmark, struct{}]) venturi.Merge[FetchBookmark, struct{}] {
	return existing.Replace()
}

// ---- The worker's shared dependencies ----

// App is the bookmark worker's state.
type App struct {
	HTTP *http.Client
	DB   *pgxpool.Pool
}

// ---- The execution side (worker binary) ----

func (b FetchBookmark) Handle(ctx context.Context, run *venturi.Run[struct{}], app App) (venturi.Outcome, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL, nil)
	if err != nil {
		// A URL we can never request is permanent.
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	resp, err := app.HTTP.Do(req)
	if err != nil {
		return venturi.Outcome{}, err // a transient network error retries with backoff
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		return venturi.Outcome{}, venturi.Permanent(errors.New("resource gone"))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 5<<20))
	if err != nil {
		return venturi.Outcome{}, err
	}
	if _, err := app.DB.Exec(ctx, `UPDATE bookmark SET content = $2 WHERE id = $1`, b.BookmarkID.String(), string(body)); err != nil {
		return venturi.Outcome{}, err
	}
	_ = run.SetAttachment(map[string]any{"bytes": len(body), "status": resp.StatusCode})
	return venturi.CompletedWith(fmt.Sprintf("fetched %d bytes", len(body))), nil
}

// buildWorker wires a worker (worker binary).
func buildWorker(pool *pgxpool.Pool, app App) *venturi.Worker[App] {
	w, err := venturi.NewWorker(pool, app, venturi.Config{})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[FetchBookmark](w)
	return w
}

// onBookmarkCreated enqueues from a producer (an HTTP handler, say), which knows only Task.
func onBookmarkCreated(ctx context.Context, q *venturi.Queue, bookmarkID ulid.ULID, url string) {
	if _, err := q.Enqueue(ctx, FetchBookmark{BookmarkID: bookmarkID, URL: url}); err != nil {
		log.Printf("enqueue fetch_bookmark: %v", err)
	}
}

// The seed's end-to-end example: a bookmark service fetches page content in the background.
// It needs a PostgreSQL database, so it is compiled but not run.
func Example_bookmark() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}

	// Worker binary.
	w := buildWorker(pool, App{HTTP: &http.Client{Timeout: 30 * time.Second}, DB: pool})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	// Producer binary.
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	id := ulid.Make()
	onBookmarkCreated(ctx, q, id, "https://example.com/article")
	// A second enqueue before the first ran replaces it: still one pending fetch.
	res, err := q.Enqueue(ctx, FetchBookmark{BookmarkID: id, URL: "https://example.com/article?v=2"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Action) // replaced, or inserted if the first fetch already started

	job, err := q.Job(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range job.Journal {
		fmt.Println(e.Event, e.Note)
	}
}

// ---- A content-aware merge ----

// Digest mails a digest of the given items to one user. Enqueues for the same user
// coalesce into one pending digest that covers every item.
type Digest struct {
	UserID int64    `json:"user_id"`
	Items  []string `json:"items"`
}

// DigestProgress is the digest's carry: how many items were already sent.
type DigestProgress struct {
	Sent int `json:"sent"`
}

func (Digest) Kind() string                 { return "digest" }
func (d Digest) DedupKey() venturi.DedupKey { return venturi.KeyOf("user", d.UserID) }

// Merge unions the items into the pending digest and keeps its progress, so a digest that
// already paused half-way continues where it was.
func (d Digest) Merge(existing venturi.Pending[Digest, DigestProgress]) venturi.Merge[Digest, DigestProgress] {
	if existing.RunCount > 0 && venturi.Failures(existing.Journal) >= 3 {
		return existing.Independent() // the pending one is struggling: start afresh beside it
	}
	items := slices.Clone(existing.Payload.Items)
	for _, it := range d.Items {
		if !slices.Contains(items, it) {
			items = append(items, it)
		}
	}
	return existing.With(Digest{UserID: d.UserID, Items: items}, existing.Carry)
}

// Merge with With: three enqueues for one user end in one job covering all their items.
func Example_merge() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	for _, items := range [][]string{{"a"}, {"b", "a"}, {"c"}} {
		res, err := q.Enqueue(ctx, Digest{UserID: 42, Items: items})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Action) // inserted, then merged, merged
	}
}
