package venturi_test

// Tests of the gated claim's virtual-time order (migration 16).

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// vtOf reads the virtual times of the given jobs, in their order.
func vtOf(t *testing.T, pool *pgxpool.Pool, ids ...ulid.ULID) []int64 {
	t.Helper()
	out := make([]int64, len(ids))
	for i, id := range ids {
		if err := pool.QueryRow(context.Background(), `SELECT COALESCE(vt, -1) FROM venturi_job WHERE id = $1`, id[:]).Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// claimOrder claims up to max jobs of kind in a transaction it rolls back and returns
// the partitions of the claimed jobs, in claim order.
func claimOrder(t *testing.T, pool *pgxpool.Pool, kind string, max int) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, `
		SELECT j.part FROM venturi_claim_gated('default', ARRAY[$1::text], $2, 5000000, 'w', 25, 'ch') WITH ORDINALITY AS c
		JOIN venturi_job j ON j.id = c.id
		ORDER BY c.ordinality`, kind, max)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return parts
}

// TestVirtualTimeInterleavesPartitions: a partition's jobs take consecutive virtual times
// (in one EnqueueMany too), a partition with nothing pending starts at the queue's front,
// and a claim takes the partitions in turn.
func TestVirtualTimeInterleavesPartitions(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	flood := make([]venturi.Task, 10)
	for i := range flood {
		flood[i] = fair{N: i, Tenant: "big"}
	}
	res, err := q.EnqueueMany(ctx, flood)
	if err != nil {
		t.Fatal(err)
	}
	var big []ulid.ULID
	for _, r := range res {
		big = append(big, r.ID)
	}
	small := []ulid.ULID{enqueue(t, q, fair{N: 0, Tenant: "small"}).ID, enqueue(t, q, fair{N: 1, Tenant: "small"}).ID}
	if got, want := vtOf(t, pool, big...), []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(got, want) {
		t.Fatalf("the flood's virtual times %v, want %v", got, want)
	}
	if got, want := vtOf(t, pool, small...), []int64{0, 1}; !slices.Equal(got, want) {
		t.Fatalf("the second partition's virtual times %v, want %v (the queue's front)", got, want)
	}
	if got, want := claimOrder(t, pool, "fair", 5), []string{"big", "small", "big", "small", "big"}; !slices.Equal(got, want) {
		t.Fatalf("claim order %v, want %v", got, want)
	}
}

// TestVirtualTimeOfReleasedAndRetriedJobs: a job whose run ends and that is due at once
// again (released unstarted, rescued, retried without delay) keeps its place; a job
// that comes due later (a backoff) goes behind its partition's others.
func TestVirtualTimeOfReleasedAndRetriedJobs(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	var ids []ulid.ULID
	for i := range 3 {
		ids = append(ids, enqueue(t, q, fair{N: i, Tenant: "a"}).ID)
	}
	first := ids[0]
	claim := `UPDATE venturi_job SET state = 'running', runs = runs + 1, lease_token = nextval('venturi_lease_token_seq'),
		lease_expires_at = now() + interval '1 minute', worker_id = 'w', attempted_at = now() WHERE id = $1`
	if _, err := pool.Exec(ctx, claim, first[:]); err != nil {
		t.Fatal(err)
	}
	// As ReleaseUnstarted returns a job: the run undone.
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'available', runs = runs - 1, lease_token = NULL,
		lease_expires_at = NULL WHERE id = $1`, first[:]); err != nil {
		t.Fatal(err)
	}
	if got := vtOf(t, pool, first); got[0] != 0 {
		t.Fatalf("released job's virtual time %d, want 0 (kept)", got[0])
	}
	if _, err := pool.Exec(ctx, claim, first[:]); err != nil {
		t.Fatal(err)
	}
	// As the lease rescue or a retry with no backoff returns it: the run counted.
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'available', failures = failures + 1, lease_token = NULL,
		lease_expires_at = NULL WHERE id = $1`, first[:]); err != nil {
		t.Fatal(err)
	}
	if got := vtOf(t, pool, first); got[0] != 0 {
		t.Fatalf("job due again at once: virtual time %d, want 0 (kept)", got[0])
	}
	if _, err := pool.Exec(ctx, claim, first[:]); err != nil {
		t.Fatal(err)
	}
	// A retry with a backoff: scheduled, then promoted when due.
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'scheduled', failures = failures + 1, lease_token = NULL,
		lease_expires_at = NULL, run_at = now() WHERE id = $1`, first[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'available' WHERE id = $1`, first[:]); err != nil {
		t.Fatal(err)
	}
	if got := vtOf(t, pool, first); got[0] != 3 {
		t.Fatalf("job due after a backoff: virtual time %d, want 3 (behind its partition's 1 and 2)", got[0])
	}
}

// closeGates inserts, for each host, a gate row of kind that holds its partition back for
// an hour: an open breaker, or a full rate window.
func closeGates(t *testing.T, pool *pgxpool.Pool, typ, kind string, hosts []string) {
	t.Helper()
	for _, h := range hosts {
		col := "open_until"
		if typ == "r" {
			col = "full_until"
		}
		if _, err := pool.Exec(context.Background(), fmt.Sprintf(`
			INSERT INTO venturi_gate (key, kind, part, %s) VALUES ($1 || chr(31) || $2 || chr(31) || $3, $2, $3, now() + interval '1 hour')`, col),
			typ, kind, h); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSmallClaimsPassOverClosedPartitions: with 40 partitions held back by open breakers
// (or full rate windows) ahead of it, a worker that claims one job at a time still runs
// the job of a healthy partition: the claim passes over the closed partitions' jobs
// without locking them. (Before migration 16 a round-robin cursor moved past them.)
func TestSmallClaimsPassOverClosedPartitions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, typ string }{{"breakers", "b"}, {"rates", "r"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, q := newQueue(t)
			var hosts []string
			for i := range 40 {
				hosts = append(hosts, fmt.Sprintf("down%02d", i))
			}
			kind := "flaky"
			if tc.typ == "r" {
				kind = "rated"
			}
			closeGates(t, pool, tc.typ, kind, hosts)
			for i, h := range hosts {
				if tc.typ == "b" {
					enqueue(t, q, flaky{N: i, Host: h})
				} else {
					enqueue(t, q, rated{N: i, Host: h})
				}
			}
			var last venturi.Task = flaky{N: 40, Host: "up"}
			if tc.typ == "r" {
				last = rated{N: 40, Host: "up"}
			}
			healthy := enqueue(t, q, last)
			cfg := fastConfig()
			cfg.Concurrency, cfg.Prefetch = 1, -1
			if tc.typ == "b" {
				startWorkerFor[flaky](t, pool, &flakyState{}, cfg)
			} else {
				startFlowWorkers[rated](t, pool, flowState{g: newGauge()}, 1, cfg)
			}
			if j := waitFinished(t, q, healthy.ID); j.State != venturi.StateCompleted {
				t.Fatalf("the job behind 40 closed partitions ended %s", j.State)
			}
			if n := countJobs(t, pool, "state = 'available' AND part LIKE 'down%' AND runs = 0"); n != 40 {
				t.Fatalf("%d jobs of closed partitions still available and never run, want 40", n)
			}
		})
	}
}

// TestMigration16UpgradesAVersion15Schema: the available gated jobs of a version-15
// schema get virtual times in their partitions' order, so the first claim after the
// upgrade interleaves the partitions; jobs written after it (by any worker: the trigger)
// get theirs too; and a version-15 worker's one-time probe still finds the gated jobs.
func TestMigration16UpgradesAVersion15Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 15)
	insert := func(part string, ageSeconds int) {
		t.Helper()
		id := ulid.Make()
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part)
			VALUES ($1, 'fair', 'default', 'available', '{}', now() - $3::int * interval '1 second', $2)`,
			id[:], part, ageSeconds); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		insert("big", 100-i) // the older ones first
	}
	for i := range 3 {
		insert("small", 10-i)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_queue (name, rr_after) VALUES ('default', 'big')`); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 16) {
		t.Fatalf("Migrate = %v, %v; want version 16 applied", applied, err)
	}
	var nullVT, maxBig, maxSmall int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE vt IS NULL),
		max(vt) FILTER (WHERE part = 'big'), max(vt) FILTER (WHERE part = 'small') FROM venturi_job`).Scan(&nullVT, &maxBig, &maxSmall); err != nil {
		t.Fatal(err)
	}
	if nullVT != 0 || maxBig != 30 || maxSmall != 3 {
		t.Fatalf("after the upgrade: %d jobs without a virtual time, big up to %d, small up to %d; want 0, 30, 3", nullVT, maxBig, maxSmall)
	}
	if got, want := claimOrder(t, pool, "fair", 6), []string{"big", "small", "big", "small", "big", "small"}; !slices.Equal(got, want) {
		t.Fatalf("first claim after the upgrade %v, want %v", got, want)
	}
	insert("new", 0) // a write as a version-15 worker makes it: the trigger gives it its place
	if got := claimOrder(t, pool, "fair", 3); !slices.Contains(got, "new") {
		t.Fatalf("a new partition's job is not among the first 3 claimed: %v", got)
	}
	var probe *string // the version-15 ClaimGated guard
	if err := pool.QueryRow(ctx, `SELECT x.part FROM venturi_job x
		WHERE x.state = 'available' AND x.part IS NOT NULL AND x.queue = 'default' ORDER BY x.part LIMIT 1`).Scan(&probe); err != nil || probe == nil {
		t.Fatalf("the version-15 probe: %v, %v", probe, err)
	}
}

// TestMigration17UpgradesAVersion16Schema: after the upgrade (functions only), a running
// gated job of the version-16 schema that its run returns to available at once keeps its
// virtual time.
func TestMigration17UpgradesAVersion16Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 16)
	id := ulid.Make()
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
		                         worker_id, attempted_at, part, vt)
		VALUES ($1, 'fair', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
		        now() - interval '1 minute', 'v16', now(), 'a', 7)`, id[:]); err != nil {
		t.Fatal(err)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 17) {
		t.Fatalf("Migrate = %v, %v; want version 17 applied", applied, err)
	}
	// As the lease rescue returns it.
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'available', failures = failures + 1, lease_token = NULL,
		lease_expires_at = NULL WHERE id = $1`, id[:]); err != nil {
		t.Fatal(err)
	}
	if got := vtOf(t, pool, id); got[0] != 7 {
		t.Fatalf("rescued job's virtual time %d, want 7 (kept)", got[0])
	}
}

// TestMigration18UpgradesAVersion17Schema: after the upgrade the running slot jobs index is
// gone, and the gated claim still counts a slot's running jobs (one running under a version-17
// worker, the other claimed after the upgrade): it admits up to the slot's limit, passes over
// the full slot, and a Replace job asks the slot's oldest run to stop.
func TestMigration18UpgradesAVersion17Schema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newEmptyDB(t)
	migrateTo(t, pool, 17)
	job := func(state string, policy int, age int) ulid.ULID {
		t.Helper()
		id := ulid.Make()
		if state == "running" {
			if _, err := pool.Exec(ctx, `
				INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, lease_token, lease_expires_at,
				                         worker_id, attempted_at, part, slot_key, slot_limit, slot_policy)
				VALUES ($1, 'slotted', 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
				        now() + interval '1 minute', 'v17', now() - $2::int * interval '1 second', 's', 's', 2, 0)`,
				id[:], age); err != nil {
				t.Fatal(err)
			}
			return id
		}
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, part, slot_key, slot_limit, slot_policy)
			VALUES ($1, 'slotted', 'default', 'available', '{}', now() - $3::int * interval '1 second', 's', 's', 2, $2)`,
			id[:], policy, age); err != nil {
			t.Fatal(err)
		}
		return id
	}
	oldest := job("running", 0, 60)
	for i := range 3 {
		job("available", 0, 30-i)
	}
	if applied, err := venturi.Migrate(ctx, pool); err != nil || !slices.Contains(applied, 18) {
		t.Fatalf("Migrate = %v, %v; want version 18 applied", applied, err)
	}
	var idx int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema()
		AND indexname = 'venturi_job_running_slot_idx'`).Scan(&idx); err != nil || idx != 0 {
		t.Fatalf("venturi_job_running_slot_idx: %d (%v), want dropped", idx, err)
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
	if n := claim(10); n != 1 {
		t.Fatalf("first claim after the upgrade took %d jobs of slot s (limit 2, 1 running), want 1", n)
	}
	if n := claim(10); n != 0 {
		t.Fatalf("the full slot gave %d more jobs, want 0", n)
	}
	job("available", 1, 0) // Replace: the slot's oldest run is asked to stop
	if n := claim(10); n != 0 {
		t.Fatalf("a Replace job of the full slot was admitted (%d)", n)
	}
	var stop *string
	if err := pool.QueryRow(ctx, `SELECT stop_event FROM venturi_job WHERE id = $1`, oldest[:]).Scan(&stop); err != nil || stop == nil || *stop != "replaced" {
		t.Fatalf("the slot's oldest run: stop_event %v (%v), want replaced", stop, err)
	}
}

// TestSlotsOnlyClaimDropsAsTheLoopDid: the slots-only claim (migration 18: kinds without
// limits, a queue without a limit) decides drops as the admission loop did: a DropIfRunning
// candidate whose slot is full is dropped, unless the claim ended (it reached its maximum)
// before it; and two candidates of one slot take what the slot has left, in order.
func TestSlotsOnlyClaimDropsAsTheLoopDid(t *testing.T) {
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
		if err := pool.QueryRow(ctx, `SELECT state FROM venturi_job WHERE id = $1`, id[:]).Scan(&s); err != nil {
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
	if err := pool.QueryRow(ctx, `SELECT journal->-1->>'note' FROM venturi_job WHERE id = $1`, drop[:]).Scan(&note); err != nil ||
		note != "dropped: slot full is full (1 of 1 running; policy DropIfRunning)" {
		t.Fatalf("drop note %q (%v)", note, err)
	}
	a, b, c := available("pair", 2, 0), available("pair", 2, 2), available("pair", 2, 2)
	if n := claim(5); n != 2 || state(a) != "running" || state(b) != "running" || state(c) != "cancelled" {
		t.Fatalf("three jobs of a slot of 2: %d claimed, states %s %s %s; want 2: running running cancelled",
			n, state(a), state(b), state(c))
	}
}
