package handlers

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/config"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
)

// Group is the value group that carries Registrations to the worker.
const Group = `group:"venturi.handlers"`

// Module provides the App, the fetcher and one Registration per task kind in the
// "venturi.handlers" group.
var Module = fx.Module("handlers",
	fx.Provide(
		func(cfg config.Config) Fetcher { return fetch.New(cfg.Fetch) },
		func(pool *pgxpool.Pool, f Fetcher, log *slog.Logger, cfg config.Config) *App {
			return NewApp(pool, f, log, cfg.MaxFetchAttempts)
		},
		fx.Annotate(func() Registration { return RegisterFetchBookmark }, fx.ResultTags(Group)),
		fx.Annotate(func() Registration { return RegisterImportBookmarks }, fx.ResultTags(Group)),
		fx.Annotate(func() Registration { return RegisterRebuildTagIndex }, fx.ResultTags(Group)),
	),
)
