// Package handlers holds the worker's side of every task kind in shared/tasks: one file per
// kind, each a handler function over the shared payload type, and App, the state they share.
//
// Go cannot add a Handle method to another package's type, so each kind is registered with
// venturi.RegisterFunc and a function of type venturi.HandlerFunc[T, *App, C], for
// example handleFetchBookmark(ctx, tasks.FetchBookmark, *venturi.Run[tasks.FetchCarry],
// *App). The payload type itself is registered, so its Kind and its enqueue-time policy
// (DedupKey, Merge, Priority) are the ones the producer uses, and registration fails if
// the carry type of the payload's Merge method is not the handler's carry type.
package handlers

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/store"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/venturi"
)

// Fetcher fetches a page; *fetch.Fetcher implements it.
type Fetcher interface {
	Fetch(ctx context.Context, url string) (*fetch.Result, error)
}

// App is the state every handler receives.
type App struct {
	Pool    *pgxpool.Pool
	Store   *store.Queries
	Queue   *venturi.Queue
	Fetcher Fetcher
	Log     *slog.Logger
	// MaxFetchAttempts is how many failed fetches a bookmark gets before it is marked
	// failed and its job dies. Default 5.
	MaxFetchAttempts int
	// LinkCheck configures the link checker singleton.
	LinkCheck LinkCheck
	// Refetch configures the daily refetch of stale bookmarks (a durable cron schedule).
	Refetch Refetch
}

// NewApp returns the handlers' state.
func NewApp(pool *pgxpool.Pool, fetcher Fetcher, log *slog.Logger, maxFetchAttempts int) *App {
	if maxFetchAttempts <= 0 {
		maxFetchAttempts = 5
	}
	return &App{Pool: pool, Store: store.New(), Queue: venturi.NewQueue(pool, venturi.QueueConfig{}), Fetcher: fetcher,
		Log: log, MaxFetchAttempts: maxFetchAttempts}
}

// Worker is the venturi worker the handlers run on.
type Worker = venturi.Worker[*App]

// Registration registers one task kind on a worker. The fx module feeds them to the worker
// through the "venturi.handlers" value group.
type Registration func(*Worker) error

// Registrations lists every task kind this worker runs, and is the only list: Module feeds
// each into the "venturi.handlers" group, and the tests register them all. Adding a kind
// means adding its handler file and its Register function here.
func Registrations() []Registration {
	return []Registration{
		RegisterFetchBookmark,
		RegisterImportBookmarks,
		RegisterFetchImportedBookmarks,
		RegisterSummarizeImport,
		RegisterRebuildTagIndex,
		RegisterLinkChecker,
		RegisterRefetchStale,
	}
}

// Queues are the queues a worker serves: venturi.DefaultQueue with interactive handlers
// (the fetches users ask for, the tag index rebuilds, an import's reindex) and
// tasks.QueueImports with imports handlers (the nodes of an import's workflow: its pages,
// the fetches of its bookmarks, its summary). Each queue
// has its own handlers and claims, so a backlog in one never delays the other.
func Queues(interactive, imports int) []venturi.WorkerQueue {
	return []venturi.WorkerQueue{
		{Name: venturi.DefaultQueue, Concurrency: interactive},
		{Name: tasks.QueueImports, Concurrency: imports},
	}
}

func uuidOf(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func parseID(s string) (pgtype.UUID, error) {
	id, err := ulid.ParseStrict(s)
	if err != nil {
		return pgtype.UUID{}, err
	}
	return uuidOf(id), nil
}
