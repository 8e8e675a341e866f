package venturi_test

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestPruneKeepsPace: more finished jobs past their retention than several prune batches
// are all deleted within a few maintenance ticks (a tick repeats full batches), and the
// jobs still within retention stay. Before, one prune of 10,000 rows per state every 30s
// capped retention at ~333 jobs/s.
func TestPruneKeepsPace(t *testing.T) {
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

// TestMigration2UpgradesAVersion1Schema: a schema at version 1 with jobs in it upgrades
// to version 2 (vacuum settings only); the jobs are untouched and still run.
func TestMigration2UpgradesAVersion1Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	v1, err := venturi.ReadMigrations(venturi.MigrationsFS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := venturi.MigrateFS(ctx, pool, fstest.MapFS{
		"001_venturi_init.up.sql": {Data: []byte(v1[0].SQL)},
	}, "venturi_migration"); err != nil {
		t.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	// A job as version 1 stores it (this version's enqueue names columns version 1 lacks).
	r := venturi.Result{ID: ulid.Make()}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at)
		VALUES ($1, 'note', 'available', '{"msg":"from v1"}', now())`, r.ID[:]); err != nil {
		t.Fatal(err)
	}
	applied, err := venturi.Migrate(ctx, pool)
	if err != nil || len(applied) == 0 || applied[0] != 2 {
		t.Fatalf("Migrate = %v, %v; want version 2 applied", applied, err)
	}
	var opts []string
	if err := pool.QueryRow(ctx, "SELECT reloptions FROM pg_class WHERE oid = 'venturi_job'::regclass").Scan(&opts); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"autovacuum_vacuum_cost_delay=0": false, "fillfactor=90": false}
	for _, o := range opts {
		if _, ok := want[o]; ok {
			want[o] = true
		}
	}
	for o, seen := range want {
		if !seen {
			t.Errorf("reloptions %v lack %s", opts, o)
		}
	}
	w := newWorker(t, pool, struct{}{}, fastConfig())
	venturi.MustRegister[noteTask](w)
	startWorker(t, w)
	if j := waitState(t, q, r, venturi.StateCompleted); j.RunCount != 1 {
		t.Fatalf("job after the upgrade: %+v", j)
	}
	if _, err := q.Job(ctx, r.ID); errors.Is(err, venturi.ErrNotFound) {
		t.Fatal("job lost")
	}
}
