package venturi_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// planTask is a no-op job for TestHotPathFindsJobsByIndexOnAFreshSchema.
type planTask struct{ N int }

func (planTask) Kind() string { return "plan" }
func (planTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// TestHotPathFindsJobsByIndexOnAFreshSchema: a worker started on a fresh schema, before
// any ANALYZE of venturi_job, claims, promotes, finishes and prunes jobs without scanning
// venturi_job whole. PostgreSQL caches a prepared statement's plan per connection (a
// generic one after five executions); a plan made while the table was empty scanned the
// whole table for every batch, however large it grew, until autovacuum's first ANALYZE
// replaced it: at 10,000 jobs/s the bench's worker fell 56,000 jobs behind in its first
// 20 s (bench/FINDINGS.md section 14). Autovacuum is off for the table here, so no ANALYZE
// comes; the scans are counted in pg_stat_user_tables once the worker's backends have
// exited (a backend reports its counts at the latest when it exits).
func TestHotPathFindsJobsByIndexOnAFreshSchema(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	schema := testdb.Schema(t)
	// Three pools, named so that their backends can be waited for: the migration's, the
	// worker's, and the test's own, in which the planner avoids whole-table scans so that
	// its checks add none to the count.
	mig, migName := planPool(t, schema, "mig", nil)
	if _, err := venturi.Migrate(ctx, mig); err != nil {
		t.Fatal(err)
	}
	if _, err := mig.Exec(ctx, "ALTER TABLE venturi_job SET (autovacuum_enabled = off)"); err != nil {
		t.Fatal(err)
	}
	mig.Close()
	pool, _ := planPool(t, schema, "test", map[string]string{"enable_seqscan": "off"})
	gone := func(name string) {
		t.Helper()
		eventually(t, within, name+"'s backends to exit", func() bool {
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 0
		})
	}
	scans := func() (seq, idx int64) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT seq_scan, COALESCE(idx_scan, 0) FROM pg_stat_user_tables
			WHERE schemaname = $1 AND relname = 'venturi_job'`, schema).Scan(&seq, &idx)
		if err != nil {
			t.Fatal(err)
		}
		return seq, idx
	}
	gone(migName) // its counts (the migrations' index builds scan the table) are in
	seq0, idx0 := scans()

	wpool, wName := planPool(t, schema, "worker", nil)
	cfg := fastConfig()
	cfg.RetainCompleted = time.Millisecond // every round prunes what the last one completed
	cfg.StatsInterval = time.Hour          // the stats sampler aggregates the whole table by design
	w := newWorker(t, wpool, struct{}{}, cfg)
	venturi.MustRegister[planTask](w)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	done := func(rs ...venturi.Result) {
		t.Helper()
		ids := make([]pgtype.UUID, len(rs))
		for i, r := range rs {
			ids[i] = pgtype.UUID{Bytes: r.ID, Valid: true}
		}
		eventually(t, within, "the jobs to finish", func() bool {
			// By primary key: the test's own checks scan nothing whole.
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_job
				WHERE id = ANY($1::uuid[]) AND state <> 'completed'`, ids).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n == 0 // completed or pruned
		})
	}
	// Rounds of one immediate and one delayed job, each waited for: on the worker's four
	// connections every statement of the claim, finish, promotion and pruning runs more
	// than five times while the table holds a handful of rows.
	for i := range 40 {
		done(enqueue(t, q, planTask{N: i}), enqueue(t, q, planTask{N: -i}, venturi.After(time.Millisecond)))
	}
	// The table grows; what was planned on it empty keeps running.
	many := make([]venturi.Task, 2000)
	for i := range many {
		many[i] = planTask{N: i}
	}
	rs, err := q.EnqueueMany(ctx, many)
	if err != nil {
		t.Fatal(err)
	}
	done(rs...)
	stopWorker(t, w)
	wpool.Close()
	gone(wName)
	seq, idx := scans()
	seq, idx = seq-seq0, idx-idx0
	t.Logf("venturi_job while the worker ran: %d sequential scans, %d index scans", seq, idx)
	if seq != 0 {
		t.Fatalf("venturi_job was scanned whole %d times (%d index scans): a plan made on the empty table scans it", seq, idx)
	}
	if idx == 0 {
		t.Fatal("no index scans counted either: the statistics were not read")
	}
}

// planPool opens a pool of at most four connections on schema with extra run-time
// settings, named after the schema and role; it closes when the test ends.
func planPool(t *testing.T, schema, role string, extra map[string]string) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	name := "venturi-plan-" + role + "-" + schema
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	for k, v := range extra {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, name
}
