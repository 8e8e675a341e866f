package maintenance_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/maintenance"
)

// insertRunning inserts a running job of kind whose lease expires after lease (negative:
// it has expired), with maxFailures and breaker ("": none).
func insertRunning(t *testing.T, b *testBundle, kind string, lease time.Duration, maxFailures int, breaker string) {
	t.Helper()
	b.exec(t, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, max_failures, lease_token,
		lease_expires_at, worker_id, attempted_at, breaker)
		VALUES (gen_random_uuid(), $1, 'default', 'running', '{}', now(), 1, $2, nextval('venturi_lease_token_seq'),
		        now() + $3 * interval '1 microsecond', 'w1', now(), NULLIF($4, ''))`,
		kind, maxFailures, lease.Microseconds(), breaker)
}

// TestRescuer runs rescue passes against running jobs set up in the schema.
func TestRescuer(t *testing.T) {
	t.Parallel()

	newRescuer := func(b *testBundle, breakers *[]string) *maintenance.Rescuer {
		return maintenance.NewRescuer(maintenance.RescuerConfig{
			Batch: 10, Lease: time.Millisecond, Logger: b.log,
			RecordBreakers: func(_ context.Context, _ pgx.Tx, p dbsqlc.BreakerRecordParams) error {
				*breakers = append(*breakers, p.Keys...)
				return nil
			},
		}, b.q)
	}

	t.Run("AnExpiredLeaseMakesTheJobAvailableAndALiveOneIsLeft", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertRunning(t, b, "expired", -time.Minute, 0, "")
		insertRunning(t, b, "live", time.Hour, 0, "")
		var breakers []string
		r := newRescuer(b, &breakers)
		var n int
		b.inTx(t, func(tx pgx.Tx) (err error) { n, err = r.RunOnce(context.Background(), tx); return err })
		if n != 1 {
			t.Fatalf("rescued %d runs, want 1", n)
		}
		if got := b.jobState(t, "expired"); got != "available" {
			t.Errorf("expired lease: state %q, want available", got)
		}
		if got := b.jobState(t, "live"); got != "running" {
			t.Errorf("live lease: state %q, want running", got)
		}
		var failures int
		var leased bool
		if err := b.pool.QueryRow(context.Background(),
			`SELECT failures, lease_token IS NOT NULL FROM venturi_job WHERE kind = 'expired'`).Scan(&failures, &leased); err != nil {
			t.Fatal(err)
		}
		if failures != 1 || leased {
			t.Errorf("rescued job: failures %d, leased %v; want 1 failure and no lease", failures, leased)
		}
		if got := r.TakeRescued(); got != 1 {
			t.Errorf("TakeRescued = %d, want 1", got)
		}
		if got := r.TakeRescued(); got != 0 {
			t.Errorf("TakeRescued again = %d, want 0", got)
		}
	})

	t.Run("TheLastFailureKillsTheJobAndReportsItsBreaker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		insertRunning(t, b, "last", -time.Minute, 1, "brk")
		var breakers []string
		r := newRescuer(b, &breakers)
		b.inTx(t, func(tx pgx.Tx) error { _, err := r.RunOnce(context.Background(), tx); return err })
		if got := b.jobState(t, "last"); got != "dead" {
			t.Errorf("state %q, want dead", got)
		}
		if !slices.Equal(breakers, []string{"brk"}) {
			t.Errorf("breakers reported %v, want [brk]", breakers)
		}
	})

	t.Run("ABatchIsAtMostBatchRuns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, k := range []string{"a", "b", "c"} {
			insertRunning(t, b, k, -time.Minute, 0, "")
		}
		r := maintenance.NewRescuer(maintenance.RescuerConfig{Batch: 2, Lease: time.Millisecond, Logger: b.log,
			RecordBreakers: func(context.Context, pgx.Tx, dbsqlc.BreakerRecordParams) error { return nil }}, b.q)
		var first, second int
		b.inTx(t, func(tx pgx.Tx) (err error) { first, err = r.RunOnce(context.Background(), tx); return err })
		b.inTx(t, func(tx pgx.Tx) (err error) { second, err = r.RunOnce(context.Background(), tx); return err })
		if first != 2 || second != 1 {
			t.Errorf("passes rescued %d then %d runs, want 2 then 1", first, second)
		}
	})
}
