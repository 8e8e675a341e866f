package venturi_test

// Tests of the gated claim's virtual-time order (start-time fair queueing across
// partitions): venturi_job_place (schema/functions/venturi_job_place.sql) gives each gated
// job its virtual time, called by the insert trigger venturi_job_vt and by the statements
// that make a job available, and venturi_claim_gated
// (schema/functions/venturi_claim_gated.sql) claims in that order.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
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
// that comes due later (a backoff) goes behind its partition's others. Each return is the
// worker's own statement (ReleaseUnstarted, RescueExpired, FinishRuns, PromoteDue), which
// assigns the virtual time itself.
func TestVirtualTimeOfReleasedAndRetriedJobs(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	db := dbsqlc.New()
	var ids []ulid.ULID
	for i := range 3 {
		ids = append(ids, enqueue(t, q, fair{N: i, Tenant: "a"}).ID)
	}
	first := ids[0]
	id := pgtype.UUID{Bytes: first, Valid: true}
	claim := func() int64 {
		t.Helper()
		var token int64
		if err := pool.QueryRow(ctx, `UPDATE venturi_job SET state = 'running', runs = runs + 1,
			lease_token = nextval('venturi_lease_token_seq'), lease_expires_at = now() + interval '1 minute',
			worker_id = 'w', attempted_at = now() WHERE id = $1 RETURNING lease_token`, first[:]).Scan(&token); err != nil {
			t.Fatal(err)
		}
		return token
	}
	finish := func(state string) {
		t.Helper()
		token := claim()
		if got, err := db.FinishRuns(ctx, pool, dbsqlc.FinishRunsParams{
			Ids: []pgtype.UUID{id}, Tokens: []int64{token}, States: []string{state}, DelaysUs: []int64{0},
			Failed: []bool{true}, SetCarry: []bool{false}, Carries: []string{""},
			Entries: []string{`[{"event":"failed","run":1}]`}, RetainDeadUs: 3600e6, RetainCompletedUs: 3600e6,
		}); err != nil || len(got) != 1 {
			t.Fatalf("FinishRuns(%s) = %v, %v; want the run ended", state, got, err)
		}
	}
	wantVT := func(what string, want int64) {
		t.Helper()
		if got := vtOf(t, pool, first); got[0] != want {
			t.Fatalf("%s: virtual time %d, want %d", what, got[0], want)
		}
	}

	token := claim()
	if got, err := db.ReleaseUnstarted(ctx, pool, dbsqlc.ReleaseUnstartedParams{Ids: []pgtype.UUID{id}, Tokens: []int64{token}}); err != nil || len(got) != 1 {
		t.Fatalf("ReleaseUnstarted = %v, %v", got, err)
	}
	wantVT("released unstarted (kept)", 0)

	claim()
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, first[:]); err != nil {
		t.Fatal(err)
	}
	if got, err := db.RescueExpired(ctx, pool, dbsqlc.RescueExpiredParams{MinUptimeUs: 0, Max: 10}); err != nil || len(got) != 1 || got[0].State != dbsqlc.VenturiJobStateAvailable {
		t.Fatalf("RescueExpired = %v, %v; want the job available again", got, err)
	}
	wantVT("rescued (kept)", 0)

	finish("available")
	wantVT("retried without delay (kept)", 0)

	finish("scheduled") // a retry with a backoff: scheduled, then promoted when due
	if n, err := db.PromoteDue(ctx, pool, 10); err != nil || n != 1 {
		t.Fatalf("PromoteDue = %d, %v; want 1", n, err)
	}
	wantVT("due after a backoff (behind its partition's 1 and 2)", 3)
}

// TestVirtualTimesOfOnePromotion: one PromoteDue that makes several jobs of a partition
// available gives them consecutive places, each behind the one before (each row's
// placement sees the rows the statement placed before it), and a plain job none.
func TestVirtualTimesOfOnePromotion(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	var ids []ulid.ULID
	for i := range 5 {
		ids = append(ids, enqueue(t, q, fair{N: i, Tenant: "a"}, venturi.After(time.Hour)).ID)
	}
	plain := enqueue(t, q, &ptrTask{N: 1}, venturi.After(time.Hour)).ID
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET run_at = now() WHERE state = 'scheduled'`); err != nil {
		t.Fatal(err)
	}
	if n, err := dbsqlc.New().PromoteDue(ctx, pool, 100); err != nil || n != 6 {
		t.Fatalf("PromoteDue = %d, %v; want 6", n, err)
	}
	got := vtOf(t, pool, ids...)
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if want := []int64{0, 1, 2, 3, 4}; !slices.Equal(sorted, want) {
		t.Fatalf("virtual times of one promotion %v, want %v in some order", got, want)
	}
	if got := vtOf(t, pool, plain); got[0] != -1 {
		t.Fatalf("plain job's virtual time %d, want none", got[0])
	}
}

// TestPlaceUnplacedPlacesWhatAnOlderWorkerLeft: a gated job made available by an update
// that sets no virtual time (an older worker's promotion) is claimed after the placed
// ones until the placement sweep places it behind its partition's pending jobs.
func TestPlaceUnplacedPlacesWhatAnOlderWorkerLeft(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	placed := enqueue(t, q, fair{N: 0, Tenant: "a"}).ID
	late := enqueue(t, q, fair{N: 1, Tenant: "b"}, venturi.After(time.Hour)).ID
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET state = 'available', run_at = now() WHERE id = $1`, late[:]); err != nil {
		t.Fatal(err)
	}
	if got := vtOf(t, pool, placed, late); !slices.Equal(got, []int64{0, -1}) {
		t.Fatalf("virtual times before the sweep %v, want [0 -1]", got)
	}
	if got := claimOrder(t, pool, "fair", 2); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("claim order before the sweep %v, want the unplaced job last", got)
	}
	if n, err := dbsqlc.New().PlaceUnplaced(ctx, pool, 10); err != nil || n != 1 {
		t.Fatalf("PlaceUnplaced = %d, %v; want 1", n, err)
	}
	if got := vtOf(t, pool, late); got[0] != 0 {
		t.Fatalf("placed job's virtual time %d, want 0 (the queue's front, its partition empty)", got[0])
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

// fairKeyed is a gated task with a dedup key and no merge method: a pending job with its
// key is replaced (InsertOrReplace).
type fairKeyed struct {
	Key    string
	Tenant string
}

func (fairKeyed) Kind() string                 { return "fair_keyed" }
func (f fairKeyed) Partition() string          { return f.Tenant }
func (f fairKeyed) DedupKey() venturi.DedupKey { return venturi.DedupKey(f.Key) }
func (fairKeyed) Handle(context.Context, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// TestVirtualTimeOfReplacedJobs: a replace that makes a scheduled gated job due places
// it behind its partition's pending jobs; one that leaves an available job where it was
// keeps its place; one that moves it to another partition places it there.
func TestVirtualTimeOfReplacedJobs(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ids := map[string]ulid.ULID{}
	for _, k := range []string{"k1", "k2"} {
		ids[k] = enqueue(t, q, fairKeyed{Key: k, Tenant: "a"}).ID
	}
	ids["k3"] = enqueue(t, q, fairKeyed{Key: "k3", Tenant: "a"}, venturi.After(time.Hour)).ID
	if got := vtOf(t, pool, ids["k1"], ids["k2"]); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("virtual times %v, want [0 1]", got)
	}
	for _, task := range []fairKeyed{{Key: "k3", Tenant: "a"}, {Key: "k1", Tenant: "a"}, {Key: "k2", Tenant: "b"}} {
		if r := enqueue(t, q, task); r.ID != ids[task.Key] {
			t.Fatalf("enqueue %+v: job %s, want %s replaced", task, r.ID, ids[task.Key])
		}
	}
	// k3 due now: behind a's 0 and 1; k1 kept; k2 first in b, at the queue's front (0).
	if got := vtOf(t, pool, ids["k3"], ids["k1"], ids["k2"]); !slices.Equal(got, []int64{2, 0, 0}) {
		t.Fatalf("virtual times of k3, k1, k2 after the replaces %v, want [2 0 0]", got)
	}
}
