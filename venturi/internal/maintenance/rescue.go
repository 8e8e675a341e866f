package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// RescuerConfig configures a Rescuer.
type RescuerConfig struct {
	// Batch is the most expired leases one pass returns (RescueExpired's limit).
	Batch int
	// Lease is the workers' lease: after a database restart, no lease is rescued until the
	// server has been up this long, so that live workers get a lease period to extend.
	Lease time.Duration
	// RecordBreakers reports the rescued runs' failures to their breakers in tx (an
	// abandoned run is a failure for its breaker).
	RecordBreakers func(ctx context.Context, tx pgx.Tx, p dbsqlc.BreakerRecordParams) error
	// Logger receives a warning for every rescued run.
	Logger *slog.Logger
}

// A Rescuer ends runs whose lease expired: their worker died or stalled. The job becomes
// available again, or dead when the failure was its last, or cancelled when its run had
// been asked to stop (RescueExpired). A Rescuer is used by one goroutine at a time.
type Rescuer struct {
	cfg     RescuerConfig   // as given to the constructor
	q       *dbsqlc.Queries // the generated statements
	rescued int             // runs rescued since the last TakeRescued
}

// NewRescuer returns a rescuer that runs q's statements.
func NewRescuer(cfg RescuerConfig, q *dbsqlc.Queries) *Rescuer {
	return &Rescuer{cfg: cfg, q: q}
}

// Step is the rescuer as a step of a duty.
func (r *Rescuer) Step() Step {
	return Step{Name: "rescue", Batch: r.cfg.Batch, Do: r.RunOnce}
}

// RunOnce ends a batch of runs whose lease expired, in tx (the caller's transaction, which
// holds the duty's lock), and returns how many it ended.
func (r *Rescuer) RunOnce(ctx context.Context, tx pgx.Tx) (int, error) {
	rows, err := r.q.RescueExpired(ctx, tx, dbsqlc.RescueExpiredParams{
		Max: int32(r.cfg.Batch), MinUptimeUs: micros(r.cfg.Lease)})
	if err != nil {
		return 0, err
	}
	var brk dbsqlc.BreakerRecordParams
	for _, row := range rows {
		r.cfg.Logger.Warn("venturi: rescued a run whose lease expired", "job", ulid.ULID(row.ID.Bytes), "kind", row.Kind, "state", row.State)
		if row.Breaker.Valid {
			brk.Keys = append(brk.Keys, row.Breaker.String)
			brk.Failed = append(brk.Failed, true)
		}
	}
	if len(brk.Keys) > 0 {
		if err := r.cfg.RecordBreakers(ctx, tx, brk); err != nil {
			return 0, err
		}
	}
	r.rescued += len(rows) // a wake-up to fetch: harmless if the transaction rolls back
	return len(rows), nil
}

// TakeRescued returns how many runs the rescuer ended since it was last called, and starts
// counting again from zero. Rescued jobs are claimable once their transaction commits.
func (r *Rescuer) TakeRescued() int {
	n := r.rescued
	r.rescued = 0
	return n
}
