package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/maintenance"
)

// TestDuty ticks duties of counting steps under the maintenance lock.
func TestDuty(t *testing.T) {
	t.Parallel()

	// countingStep returns a step of batch 2 that reports full batches until it has been
	// called full times, and the number of calls so far.
	countingStep := func(full int) (maintenance.Step, *int) {
		calls := new(int)
		return maintenance.Step{Name: "count", Batch: 2, Do: func(context.Context, pgx.Tx) (int, error) {
			*calls++
			if *calls <= full {
				return 2, nil
			}
			return 1, nil
		}}, calls
	}

	t.Run("FullBatchesRepeatUntilTheStepCatchesUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		step, calls := countingStep(2)
		idle, idleCalls := countingStep(0)
		d := maintenance.NewDuty(maintenance.DutyConfig{Name: "test", Lock: b.q.TryMaintenanceLock,
			Steps: []maintenance.Step{step, idle}, Budget: time.Hour, InTx: b.txFunc, Logger: b.log})
		held, err := d.Tick(context.Background(), []bool{true, true})
		if err != nil || !held {
			t.Fatalf("Tick = %v, %v; want the lock held and no error", held, err)
		}
		if *calls != 3 || *idleCalls != 1 {
			t.Errorf("steps called %d and %d times, want 3 (two full batches, then one short) and 1", *calls, *idleCalls)
		}
	})

	t.Run("StepsNotMarkedDoNotRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		step, calls := countingStep(0)
		d := maintenance.NewDuty(maintenance.DutyConfig{Name: "test", Lock: b.q.TryMaintenanceLock,
			Steps: []maintenance.Step{step}, Budget: time.Hour, InTx: b.txFunc, Logger: b.log})
		if _, err := d.Tick(context.Background(), []bool{false}); err != nil {
			t.Fatal(err)
		}
		if *calls != 0 {
			t.Errorf("an unmarked step ran %d times", *calls)
		}
	})

	t.Run("AWorkerWithoutTheLockDoesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()
		other, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Rollback(ctx) //nolint:errcheck // releases the lock
		if locked, err := b.q.TryMaintenanceLock(ctx, other); err != nil || !locked {
			t.Fatalf("lock in the other transaction: %v, %v", locked, err)
		}
		step, calls := countingStep(0)
		d := maintenance.NewDuty(maintenance.DutyConfig{Name: "test", Lock: b.q.TryMaintenanceLock,
			Steps: []maintenance.Step{step}, Budget: time.Hour, InTx: b.txFunc, Logger: b.log})
		held, err := d.Tick(ctx, []bool{true})
		if err != nil || held {
			t.Fatalf("Tick = %v, %v; want the lock not held and no error", held, err)
		}
		if *calls != 0 {
			t.Errorf("the step ran %d times without the lock", *calls)
		}
	})

	t.Run("ATickStopsWhenItsBudgetIsSpent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		step, calls := countingStep(1000)
		d := maintenance.NewDuty(maintenance.DutyConfig{Name: "test", Lock: b.q.TryMaintenanceLock,
			Steps: []maintenance.Step{step}, Budget: 0, InTx: b.txFunc, Logger: b.log})
		held, err := d.Tick(context.Background(), []bool{true})
		if err != nil || !held {
			t.Fatalf("Tick = %v, %v; want the lock held and no error", held, err)
		}
		if *calls >= 1000 {
			t.Errorf("the step ran %d times with no budget left", *calls)
		}
	})
}

// TestBudget: the tick budget is the interval, clamped to [250ms, 5s].
func TestBudget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ interval, want time.Duration }{
		{10 * time.Millisecond, 250 * time.Millisecond},
		{time.Second, time.Second},
		{time.Minute, 5 * time.Second},
	} {
		if got := maintenance.Budget(tt.interval); got != tt.want {
			t.Errorf("Budget(%v) = %v, want %v", tt.interval, got, tt.want)
		}
	}
}
