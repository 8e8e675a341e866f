package maintenance_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/maintenance"
)

// TestPromoter runs promotion passes against rows set up in the schema.
func TestPromoter(t *testing.T) {
	t.Parallel()

	t.Run("DueScheduledAndTimedOutWaitingJobsBecomeAvailable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at) VALUES
			(gen_random_uuid(), 'due', 'default', 'scheduled', '{}', now() - interval '1 second'),
			(gen_random_uuid(), 'later', 'default', 'scheduled', '{}', now() + interval '1 hour'),
			(gen_random_uuid(), 'timedout', 'default', 'waiting', '{}', now() - interval '1 second'),
			(gen_random_uuid(), 'waiting', 'default', 'waiting', '{}', now() + interval '1 hour')`)
		p := maintenance.NewPromoter(maintenance.PromoterConfig{Batch: 10}, b.q)
		var n int
		b.inTx(t, func(tx pgx.Tx) (err error) { n, err = p.RunOnce(context.Background(), tx); return err })
		if n != 2 {
			t.Errorf("promoted %d jobs, want 2", n)
		}
		for kind, want := range map[string]string{"due": "available", "later": "scheduled", "timedout": "available", "waiting": "waiting"} {
			if got := b.jobState(t, kind); got != want {
				t.Errorf("%s: state %q, want %q", kind, got, want)
			}
		}
	})
}
