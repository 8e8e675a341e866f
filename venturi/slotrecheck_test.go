package venturi_test

import (
	"context"
	"slices"
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
		if err := pool.QueryRow(ctx, `SELECT state FROM venturi_job WHERE id = $1`, id[:]).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	return state(a), state(b), took
}

// TestDropDecidedOnAStaleCountIsNotMade: a DropIfRunning slot whose only run ended while a
// claim was between counting the slot and reading its candidates. Before migration 19 the
// claim dropped both the job that had run (it met its own run in the count) and the other
// job of the slot, so no job of the slot would ever complete (found by the chaos suite). The
// jobs must stay available, and a next claim runs one of them.
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
	if err := pool.QueryRow(ctx, `SELECT stop_event FROM venturi_job WHERE id = $1`, id[:]).Scan(&stop); err != nil || stop != nil {
		t.Fatalf("the run that went on: stop_event %v (%v), want none (its slot had room)", stop, err)
	}
}

// TestMigration19UpgradesAVersion18Schema: with jobs in a full DropIfRunning slot and a
// full Replace slot, the upgrade leaves them alone, and claims after it drop and replace as
// before when the slots really are full.
func TestMigration19UpgradesAVersion18Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 18)
	job := func(state, slot string, policy int) ulid.ULID {
		t.Helper()
		id := ulid.Make()
		q := `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
		      VALUES ($1, 'slotted', 'default', 'available', '{}', now(), $2, $2, 1, $3)`
		if state == "running" {
			q = `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
			                             worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
			     VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
			             now() + interval '1 minute', 'v18', now(), $2, $2, 1, $3)`
		}
		if _, err := pool.Exec(ctx, q, id[:], slot, policy); err != nil {
			t.Fatal(err)
		}
		return id
	}
	job("running", "d", int(venturi.SlotDropIfRunning))
	dropped := job("available", "d", int(venturi.SlotDropIfRunning))
	replaced := job("running", "r", int(venturi.SlotReplace))
	job("available", "r", int(venturi.SlotReplace))
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 19) {
		t.Fatalf("Migrate = %v, %v; want version 19 applied", applied, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_claim_gated('default', ARRAY['slotted'], 10, 5000000, 'w', 25, 'ch')
		WHERE id IS NOT NULL`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("claim over two full slots took %d (%v), want 0", n, err)
	}
	var state string
	var stop *string
	if err := pool.QueryRow(ctx, `SELECT state FROM venturi_job WHERE id = $1`, dropped[:]).Scan(&state); err != nil || state != "cancelled" {
		t.Fatalf("the DropIfRunning job of the full slot is %s (%v), want cancelled", state, err)
	}
	if err := pool.QueryRow(ctx, `SELECT stop_event FROM venturi_job WHERE id = $1`, replaced[:]).Scan(&stop); err != nil || stop == nil || *stop != "replaced" {
		t.Fatalf("the Replace slot's run: stop_event %v (%v), want replaced", stop, err)
	}
}
