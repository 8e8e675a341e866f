package venturi_test

// Tests of the gated claim's admission (venturi_claim_gated,
// schema/functions/venturi_claim_gated.sql): slots and their DropIfRunning and Replace
// policies, and partitions held back by their gates.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// staleSlotClaim runs one gated claim that counts the slots' running jobs while the job
// running in slot "d" still runs, and reads its candidates after that run has ended with
// the job back to available (as a rescue, a release or a retry leaves it): the window
// between the claim's count and its candidate scan, held open by a lock on venturi_kind,
// which the claim first reads between the two. It returns the states of the job that ran
// and of a second job of the slot, and how many jobs the claim took.
func staleSlotClaim(t *testing.T, pool *pgxpool.Pool, limit, policy int) (ran, other string, took int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	insert := func(state string) ulid.ULID {
		t.Helper()
		id := ulid.Make()
		q := `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
		      VALUES ($1, 'slotted', 'default', 'available', '{}', now(), 'd', 'd', $2, $3)`
		if state == "running" {
			q = `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
			                             worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
			     VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
			             now() + interval '1 minute', 'w0', now(), 'd', 'd', $2, $3)`
		}
		if _, err := pool.Exec(ctx, q, id[:], limit, policy); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a := insert("running")
	b := insert("available")

	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, `LOCK TABLE venturi_kind IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	claimer, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer claimer.Release()
	var pid int
	if err := claimer.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- claimer.QueryRow(ctx, `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['slotted'], 10, 5000000, 'w', 25, 'ch')
			WHERE id IS NOT NULL`).Scan(&took)
	}()
	// The claim has counted the slot (a's run included) and waits for venturi_kind.
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = $1 AND NOT l.granted
			AND l.relation = 'venturi_kind'::regclass)`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the claim ended (%v) before it waited for venturi_kind", err)
		case <-ctx.Done():
			t.Fatal("the claim never waited for venturi_kind")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// a's run ends back to available (a rescue's effect), committed with the lock's release.
	if _, err := blocker.Exec(ctx, `UPDATE venturi_job SET state = 'available', lease_token = NULL,
		lease_expires_at = NULL, worker_id = NULL WHERE id = $1`, a[:]); err != nil {
		t.Fatal(err)
	}
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	state := func(id ulid.ULID) string {
		var s string
		if err := pool.QueryRow(ctx, `SELECT state FROM venturi_job_all WHERE id = $1`, id[:]).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	return state(a), state(b), took
}

// TestDropDecidedOnAStaleCountIsNotMade: a DropIfRunning slot whose only run ended while a
// claim was between counting the slot and reading its candidates: venturi_claim_gated
// (schema/functions/venturi_claim_gated.sql) rechecks the slot before it drops, so it does
// not drop both the job that had run (it met its own run in the count) and the other job
// of the slot, which would leave no job of the slot to ever complete (as the chaos suite
// once found). The jobs must stay available, and a next claim runs one of them.
func TestDropDecidedOnAStaleCountIsNotMade(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ran, other, took := staleSlotClaim(t, pool, 1, int(venturi.SlotDropIfRunning))
	if ran != "available" || other != "available" {
		t.Fatalf("after the claim on a stale count (took %d): the job that ran is %s, the other %s; want both available", took, ran, other)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['slotted'], 10, 5000000, 'w', 25, 'ch')
		WHERE id IS NOT NULL`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("next claim took %d (%v), want 1", n, err)
	}
}

// TestReplaceDecidedOnAStaleCountIsNotMade: the same window for a Replace slot of limit 2
// with a second run going on: the slot had room once the first run ended, so no run is
// asked to stop.
func TestReplaceDecidedOnAStaleCountIsNotMade(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := context.Background()
	// A second run of the slot that goes on throughout (limit 2: with the first, full).
	id := ulid.Make()
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token,
		lease_expires_at, worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
		VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
		        now() + interval '1 minute', 'w1', now() - interval '1 minute', 'd', 'd', 2, $2)`,
		id[:], int(venturi.SlotReplace)); err != nil {
		t.Fatal(err)
	}
	staleSlotClaim(t, pool, 2, int(venturi.SlotReplace))
	var stop *string
	if err := pool.QueryRow(ctx, `SELECT stop_event FROM venturi_job_all WHERE id = $1`, id[:]).Scan(&stop); err != nil || stop != nil {
		t.Fatalf("the run that went on: stop_event %v (%v), want none (its slot had room)", stop, err)
	}
}

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

// TestSlotsOnlyClaimDropsAsTheAdmissionLoop: the slots-only claim of venturi_claim_gated
// (schema/functions/venturi_claim_gated.sql: kinds without limits, a queue without a
// limit), decided in one statement, decides drops as the function's admission loop does:
// a DropIfRunning candidate whose slot is full is dropped, unless the claim ended (it
// reached its maximum) before it; and two candidates of one slot take what the slot has
// left, in order.
func TestSlotsOnlyClaimDropsAsTheAdmissionLoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	running := func(slot string) {
		t.Helper()
		id := ulid.Make()
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
			                         worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
			VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
			        now() + interval '1 minute', 'w0', now(), $2, $2, 1, 0)`, id[:], slot); err != nil {
			t.Fatal(err)
		}
	}
	available := func(slot string, limit, policy int) ulid.ULID {
		t.Helper()
		id := ulid.Make()
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
			VALUES ($1, 'slotted', 'default', 'available', '{}', now(), $2, $2, $3, $4)`, id[:], slot, limit, policy); err != nil {
			t.Fatal(err)
		}
		return id
	}
	state := func(id ulid.ULID) string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT state FROM venturi_job_all WHERE id = $1`, id[:]).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	claim := func(max int) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['slotted'], $1, 5000000, 'w', 25, 'ch')
			WHERE id IS NOT NULL`, max).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	running("full")
	free := available("free", 1, 0)
	drop := available("full", 1, 2) // its slot holds one running job of one
	if n := claim(1); n != 1 || state(free) != "running" || state(drop) != "available" {
		t.Fatalf("claim of 1: %d jobs, free %s, drop %s; want 1, running, available (the claim ended before the drop job)",
			n, state(free), state(drop))
	}
	if n := claim(5); n != 0 || state(drop) != "cancelled" {
		t.Fatalf("claim of 5: %d jobs, drop %s; want 0, cancelled", n, state(drop))
	}
	var note string
	if err := pool.QueryRow(ctx, `SELECT journal->-1->>'note' FROM venturi_job_all WHERE id = $1`, drop[:]).Scan(&note); err != nil ||
		note != "dropped: slot full is full (1 of 1 running; policy DropIfRunning)" {
		t.Fatalf("drop note %q (%v)", note, err)
	}
	a, b, c := available("pair", 2, 0), available("pair", 2, 2), available("pair", 2, 2)
	if n := claim(5); n != 2 || state(a) != "running" || state(b) != "running" || state(c) != "cancelled" {
		t.Fatalf("three jobs of a slot of 2: %d claimed, states %s %s %s; want 2: running running cancelled",
			n, state(a), state(b), state(c))
	}
}
