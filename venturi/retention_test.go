package venturi_test

import (
	"context"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// TestPruneKeepsPace: more finished jobs past their retention than several prune batches
// are all deleted within a few maintenance ticks (a tick repeats full batches), and the
// jobs still within retention stay. Before, one prune of 10,000 rows per state every 30s
// capped retention at ~333 jobs/s.
func TestPruneKeepsPace(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	old := 3*venturi.PruneBatch + 17
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at, finished_at)
		SELECT gen_random_uuid(), 'note', s.state::venturi_job_state, '{}', now(), now() - interval '1 hour'
		FROM (SELECT CASE WHEN i % 10 = 0 THEN 'dead' ELSE 'completed' END AS state
		      FROM generate_series(1, $1) i) s`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at, finished_at)
		SELECT gen_random_uuid(), 'note', 'completed', '{}', now(), now() FROM generate_series(1, 100)`); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	cfg.RetainCompleted, cfg.RetainDead = time.Minute, time.Minute
	w := newWorker(t, pool, struct{}{}, cfg)
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	eventually(t, within, "every finished job past retention to be pruned", func() bool {
		return countJobs(t, pool, "finished_at < now() - interval '1 minute'") == 0
	})
	if n := countJobs(t, pool, "state = 'completed'"); n != 100 {
		t.Fatalf("%d completed jobs within retention left, want 100", n)
	}
}
