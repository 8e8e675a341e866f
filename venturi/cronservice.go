package venturi

// The cron service: every worker fires due schedules (see cron.go for the schedules and
// their API, internal/cronexpr for the parser, internal/maintenance for the firing).

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/maintenance"
)

// newCronFirer returns the firer of the maintainer's schema, configured from m.cfg.
func (m *maintainer) newCronFirer() *maintenance.CronFirer {
	cfg := maintenance.CronFirerConfig{
		Interval: m.cfg.MaintenanceInterval, Batch: cronBatch, CountLimit: cronCountLimit,
		LockedRetry: cronLockedRetry, PruneBatch: PruneBatch, RetainFires: m.cfg.RetainCompleted,
		InTx: func(ctx context.Context, fn func(pgx.Tx) error) error {
			return inTx(ctx, m.db, pgx.TxOptions{}, idleTxBound(m.cfg.Lease), fn)
		},
		Logger: m.log,
	}
	if !m.cfg.PollOnly {
		channel := notifyChannel(m.db)
		cfg.Notify = func(ctx context.Context, tx pgx.Tx, kind string) error {
			return m.q.Notify(ctx, tx, dbsqlc.NotifyParams{Channel: channel, Payload: notifyPayload(kind, true)})
		}
	}
	return maintenance.NewCronFirer(cfg, m.db, m.q)
}

// startCron runs the worker's cron firer until ctx ends; the returned function waits for
// it to return. The maintainer starts it.
func (m *maintainer) startCron(ctx context.Context) (wait func()) {
	s := m.newCronFirer()
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	return func() { <-done }
}
