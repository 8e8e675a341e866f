package venturi

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi/internal/fetcher"
	"github.com/venturi-dev/venturi/internal/jobrun"
)

// newFetcher returns the fetcher (internal/fetcher) of the queue cfg is for (see
// Config.forQueue): it claims kinds on db, feeds exec (nil for Drain, which only claims
// and releases), holds the jobs in tracker, and sends no statement after dbCtx ends.
func newFetcher(cfg Config, db *pgxpool.Pool, kinds []string, exec fetcher.Executor, tracker *jobrun.Tracker, dbCtx context.Context, channel string, log *slog.Logger) *fetcher.Fetcher {
	return fetcher.New(fetcher.Config{
		WorkerID: cfg.ID, Queue: cfg.Queue, Kinds: kinds, Channel: channel,
		Concurrency: cfg.Concurrency, Prefetch: cfg.Prefetch, PrefetchWait: cfg.prefetchWait(),
		ClaimBatch: cfg.ClaimBatch, FetchCooldown: cfg.FetchCooldown, PollInterval: cfg.PollInterval,
		Lease: cfg.Lease, IdleTxMs: idleTxMs(idleTxBound(cfg.Lease)), MaxFailures: cfg.MaxFailures,
		PromoteBatch: PromoteBatch, DB: db,
		Send:     func(ctx context.Context, queue func(*pgx.Batch)) error { return sendIndexed(ctx, db, queue) },
		Executor: exec, Tracker: tracker, DBCtx: dbCtx, Logger: log,
	})
}
