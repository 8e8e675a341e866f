package venturi_test

// Tests of the gated claim's virtual-time order (start-time fair queueing across
// partitions): venturi_job_vt (schema/functions/venturi_job_vt.sql) gives each gated job
// its virtual time, and venturi_claim_gated (schema/functions/venturi_claim_gated.sql)
// claims in that order.

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
// without locking them, rather than moving a cursor past them.
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
