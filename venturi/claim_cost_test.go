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

// migration12Prev is the version migration 12 upgrades from in its test.
const migration12Prev = 10

// TestMigration12ClaimsAdmitByTheRunningCount: after the upgrade (functions only), a
// claim of many slot jobs over many keys admits, per slot, only what its limit leaves
// beside the jobs already running in it: the running count now comes from one grouped
// pass over the running slot jobs instead of a per-key array test. Each claimed job comes
// back with its row's metadata and due time.
func TestMigration12ClaimsAdmitByTheRunningCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, migration12Prev)
	const keys, perKey, limit = 60, 4, 2
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		if k%3 == 0 { // a third of the slots have one job running elsewhere
			if _, err := pool.Exec(ctx, `
				INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
				                         worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
				VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
				        now() + interval '1 hour', 'elsewhere', now(), $2, $2, $3, 0)`,
				ulid.Make().Bytes(), key, limit); err != nil {
				t.Fatal(err)
			}
		}
		for range perKey {
			if _, err := pool.Exec(ctx, `
				INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy, meta)
				VALUES ($1, 'slotted', 'default', 'available', '{}', now() - $4::int * interval '1 second', $2, $2, $3, 0,
				        CASE WHEN $4::int % 2 = 0 THEN jsonb_build_object('key', $2::text) END)`,
				ulid.Make().Bytes(), key, limit, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || len(applied) == 0 || applied[0] != 12 {
		t.Fatalf("Migrate = %v, %v; want version 12 first", applied, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, `
		SELECT j.slot_key, count(*),
		       count(*) FILTER (WHERE c.meta IS DISTINCT FROM COALESCE(j.meta, 'null'::jsonb) OR c.run_at IS DISTINCT FROM j.run_at)
		FROM venturi_claim_gated('default', ARRAY['slotted'], 1000, 5000000, 'w', 25, 'ch') c
		JOIN venturi_job j ON j.id = c.id -- the statement's snapshot: the rows as they were before the claim
		GROUP BY j.slot_key`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var key string
		var n, wrong int
		if err := rows.Scan(&key, &n, &wrong); err != nil {
			t.Fatal(err)
		}
		if wrong > 0 { // the two columns migration 12 added
			t.Errorf("slot %s: %d claimed jobs came back with another meta or run_at than their row's", key, wrong)
		}
		got[key] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		key, want := fmt.Sprintf("k%02d", k), limit
		if k%3 == 0 {
			want = limit - 1
		}
		if got[key] != want {
			t.Errorf("slot %s: claimed %d, want %d (limit %d, %d running)", key, got[key], want, limit, limit-want)
		}
	}
}
