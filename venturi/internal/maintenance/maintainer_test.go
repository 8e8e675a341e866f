package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/maintenance"
)

// within bounds every wait of the package's tests: generous, so that a loaded machine
// does not turn slowness into failures.
const within = 30 * time.Second

// wait returns when ch delivers, or fails the test after within.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("no %s within %v", what, within)
	}
}

// TestMaintainer runs the loops against a schema and watches their hooks.
func TestMaintainer(t *testing.T) {
	t.Parallel()

	t.Run("TheLoopsRescuePruneAndReportUntilStopped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertRunning(t, b, "expired", -time.Minute, 0, "")
		insertFinished(t, b, "old", "completed", 2*time.Hour)
		rescued := make(chan struct{}, 1)
		retained := make(chan struct{}, 1)
		signal := func(ch chan struct{}) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		interval := 10 * time.Millisecond
		m := maintenance.NewMaintainer(maintenance.MaintainerConfig{
			Interval: interval, Lease: time.Millisecond, InTx: b.txFunc, Logger: b.log,
			OnRescued:      func() { signal(rescued) },
			AfterRetention: func(context.Context) { signal(retained) },
		}, b.q,
			maintenance.NewRescuer(maintenance.RescuerConfig{Batch: 10, Lease: time.Millisecond, Logger: b.log,
				RecordBreakers: func(context.Context, pgx.Tx, dbsqlc.BreakerRecordParams) error { return nil }}, b.q),
			maintenance.NewPromoter(maintenance.PromoterConfig{Batch: 10}, b.q),
			maintenance.NewPruner(maintenance.PrunerConfig{Batch: 10, RetainCompleted: time.Hour, RetainDead: time.Hour,
				CompletedPartition: time.Hour, DeadPartition: time.Hour, LockTimeout: time.Second, Logger: b.log}, b.q),
			maintenance.NewGateSweeper(maintenance.GateSweeperConfig{Batch: 10, RetainIdleGates: time.Hour,
				Interval: interval, Logger: b.log}, b.q),
			maintenance.NewOrphanSweeper(maintenance.OrphanSweeperConfig{Batch: 10, Every: time.Hour, Logger: b.log}, b.q))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); m.Run(ctx) }()
		wait(t, rescued, "rescue")
		if got := b.jobState(t, "expired"); got != "available" {
			t.Errorf("after OnRescued the job is %q, want available", got)
		}
		wait(t, retained, "retention tick") // the job was inserted before Run: the first tick deletes it (past its retention)
		if got := b.jobState(t, "old"); got != "" {
			t.Errorf("after a retention tick the finished job is still there (%q)", got)
		}
		cancel()
		wait(t, done, "return from Run after cancel")
	})
}
