package handlers

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/config"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/fetch"
	"github.com/venturi-dev/bookmarks/shared/telemetry"
	"github.com/venturi-dev/venturi"
)

// Group is the value group that carries Registrations to the worker. Another fx module can
// add a kind of its own with fx.Annotate(func() Registration { ... }, fx.ResultTags(Group)).
const Group = `group:"venturi.handlers"`

// Module provides the App, the fetcher and every Registration of [Registrations] in the
// "venturi.handlers" group: the list is provided once, flattened into one group value per
// kind, so adding a kind to Registrations is all the fx wiring it needs.
var Module = fx.Module("handlers",
	fx.Provide(
		func(cfg config.Config) Fetcher { return fetch.New(cfg.Fetch) },
		func(pool *pgxpool.Pool, f Fetcher, log *slog.Logger, cfg config.Config, tel *telemetry.Telemetry) *App {
			app := NewApp(pool, f, log, cfg.MaxFetchAttempts)
			// The handlers' enqueues (an import's fetches, the link checker's refetches) are
			// spans under their run's, carried to the jobs they make.
			app.Queue = venturi.NewQueue(pool, venturi.QueueConfig{Middleware: []venturi.EnqueueMiddleware{tel.Venturi.Enqueue}})
			app.LinkCheck = LinkCheck{PageSize: cfg.LinkCheckPageSize, Interval: cfg.LinkCheckInterval, StaleAfter: cfg.LinkCheckStaleAfter}
			app.Refetch = Refetch{Cron: cfg.RefetchCron, TimeZone: cfg.RefetchTimeZone, StaleAfter: cfg.RefetchStaleAfter,
				Batch: cfg.RefetchBatch, MaxBatches: cfg.RefetchMaxBatches}
			return app
		},
		fx.Annotate(Registrations, fx.ResultTags(`group:"venturi.handlers,flatten"`)),
	),
)
