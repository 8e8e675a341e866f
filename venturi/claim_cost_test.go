package venturi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// holdSlot inserts a job running elsewhere (a lease an hour long) that holds slot key,
// whose limit is 1.
func holdSlot(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	id := ulid.Make()
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
		                         worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
		VALUES ($1, 'slotted', 'default', 'running', $2, now(), 1, nextval('venturi_lease_token_seq'),
		        now() + interval '1 hour', 'elsewhere', now(), $3, $3, 1, 0)`,
		id[:], fmt.Sprintf(`{"Key":%q,"Limit":1}`, key), key); err != nil {
		t.Fatal(err)
	}
}

// TestSmallClaimsReachPartitionsBehindBlockedOnes: a claim looks at 16 more partitions
// than it asks jobs for (at least 32), so with the first 40 partitions' slots
// full, a worker that claims one job at a time must still reach the partition after
// them: the round-robin cursor moves past the partitions a claim looked at, even when
// their gates held everything back.
func TestSmallClaimsReachPartitionsBehindBlockedOnes(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	for i := range 40 {
		key := fmt.Sprintf("a%02d", i)
		holdSlot(t, pool, key)
		enqueue(t, q, slotted{N: i, Key: key, Limit: 1})
	}
	last := enqueue(t, q, slotted{N: 40, Key: "z", Limit: 1})
	cfg := fastConfig()
	cfg.Concurrency, cfg.Prefetch = 1, -1
	startFlowWorkers[slotted](t, pool, flowState{g: newGauge()}, 1, cfg)
	if j := waitFinished(t, q, last.ID); j.State != venturi.StateCompleted {
		t.Fatalf("the job behind 40 full slots ended %s", j.State)
	}
	if n := countJobs(t, pool, "state = 'available' AND slot_key LIKE 'a%'"); n != 40 {
		t.Fatalf("%d jobs of full slots still available, want 40 (their slots stay full)", n)
	}
}

// TestMigration7UpgradesAVersion6Schema: gated jobs of a version-6 schema (a slot held by
// a job whose lease expired, a round-robin cursor) all run after the upgrade, one at a
// time per slot; and a version-6 worker's claim (the function called with the same
// arguments, without the version-7 guard) still claims.
func TestMigration7UpgradesAVersion6Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 6)
	var ids []ulid.ULID
	for i := range 6 {
		id := ulid.Make()
		key := fmt.Sprintf("s%d", i%2)
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
			VALUES ($1, 'slotted', 'default', 'available', $2, now(), $3, $3, 1, 0)`,
			id[:], fmt.Sprintf(`{"N":%d,"Key":%q,"Limit":1,"Ms":5}`, i, key), key); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	expired := ulid.Make()
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
		                         worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
		VALUES ($1, 'slotted', 'default', 'running', '{"N":9,"Key":"s0","Limit":1,"Ms":5}', now(), 1, 7,
		        now() - interval '1 hour', 'v6-worker', now() - interval '1 hour', 's0', 's0', 1, 0)`,
		expired[:]); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, expired)
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_queue (name, rr_after) VALUES ('default', 's0')`); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 7 {
		t.Fatalf("Migrate = %v, %v; want version 7", applied, err)
	}

	// A version-6 worker calls the function as before (rolled back: only the call is tested).
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['slotted'], 10, 5000000, 'v6', 25, 'ch') WHERE id IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n != 1 { // slot s0 is held by the expired run until the rescue; s1 admits one
		t.Fatalf("a version-6 claim got %d jobs, want 1", n)
	}

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	g := newGauge()
	startFlowWorkers[slotted](t, pool, flowState{g: g}, 2, fastConfig())
	for _, id := range ids {
		if j := waitFinished(t, q, id); j.State != venturi.StateCompleted {
			t.Fatalf("job %s ended %s", id, j.State)
		}
	}
	for _, key := range []string{"s0", "s1"} {
		if m := g.max(key); m > 1 {
			t.Fatalf("slot %s ran %d jobs at once, limit 1", key, m)
		}
	}
}
