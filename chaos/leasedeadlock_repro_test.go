//go:build repro

// Reproduction of an open venturi bug (chaos/README.md, "Bugs found": "a worker's lease
// extension and its release of stale prefetched jobs deadlock"). It fails against venturi
// f40089c, and is kept out of `make test/chaos` by its build tag until venturi is fixed:
//
//	scripts/pg.sh with -- bash -c 'cd chaos && go test -tags repro -run TestLeaseExtensionAndReleaseDeadlock -count=1 -v .'
//
// Both statements take many running jobs by `FROM unnest(ids) ... WHERE j.id = u.id`, and
// the worker sorts the IDs of both so that they lock rows in one order. But the order in
// which an UPDATE locks rows is its plan's, not the array's. On a table of 5,000 jobs
// (PostgreSQL 15): up to ~10 IDs, a nested loop over the array (ID order); from ~50 to
// ~100, a hash join that hashes the array and scans the table (heap order); from ~200, a
// hash join that hashes the table and probes with the array (ID order again). When the
// two run at once on overlapping jobs with plans of different orders (a worker that
// prefetched a large claim: the stale part is released while the lease extender extends
// them all), they deadlock. PostgreSQL breaks the deadlock only after
// deadlock_timeout (1s), which is the extension's whole timeout (Lease/2) with a 2s lease:
// both statements fail, and every prefetched job's lease expires on a healthy worker (the
// failover-sync run of chaos/README.md: 173 runs abandoned, "lease expired: worker ...
// stopped extending it", counted as failures).
package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The two statements, as in venturi/internal/dbsqlc/queries.sql at f40089c.
const (
	reproExtendLeases = `UPDATE venturi_job j SET lease_expires_at = now() + interval '1 microsecond' * $1::bigint
FROM (SELECT unnest($2::uuid[]) AS id, unnest($3::bigint[]) AS token) AS u
WHERE j.id = u.id AND j.lease_token = u.token
RETURNING j.id, COALESCE(j.stop_event, '')::text AS stop_event`
	reproReleaseUnstarted = `UPDATE venturi_job j SET
    state = (CASE WHEN j.stop_event IS NULL THEN 'available' ELSE 'cancelled' END)::venturi_job_state,
    finished_at = CASE WHEN j.stop_event IS NOT NULL THEN now() END,
    journal = CASE WHEN j.stop_event IS NULL THEN j.journal
                   ELSE j.journal || jsonb_build_array(jsonb_build_object('event', j.stop_event, 'note', j.stop_note, 'at', now())) END,
    part = CASE WHEN j.part IS NULL AND EXISTS (SELECT 1 FROM venturi_kind vk WHERE vk.kind = j.kind AND vk.limited)
                THEN '' ELSE j.part END,
    runs = j.runs - 1, lease_token = NULL, lease_expires_at = NULL
FROM (SELECT unnest($1::uuid[]) AS id, unnest($2::bigint[]) AS token) AS u
WHERE j.id = u.id AND j.lease_token = u.token
RETURNING j.id`
)

type reproJob struct {
	id    pgtype.UUID
	token int64
	heap  [2]int64 // ctid: block, item
}

func heapBefore(a, b reproJob) bool {
	return a.heap[0] < b.heap[0] || (a.heap[0] == b.heap[0] && a.heap[1] < b.heap[1])
}

// explain is a statement's plan, one line per node.
func explain(t *testing.T, ctx context.Context, pool *pgxpool.Pool, q string, args ...any) string {
	t.Helper()
	rows, err := pool.Query(ctx, "EXPLAIN (COSTS OFF) "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestLeaseExtensionAndReleaseDeadlock: a worker holds 300 running jobs among 5,000 (as
// after a large claim); its lease extension takes all 300, its release of stale
// prefetched jobs 100 of them, both in ID order. Neither may wait for the other in a
// cycle, whichever job a third session holds for a moment.
func TestLeaseExtensionAndReleaseDeadlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := gateSchema(t, ctx, "chaos_repro_deadlock")
	for _, q := range []string{
		`INSERT INTO venturi_job (id, kind, state, payload, run_at)
		 SELECT gen_random_uuid(), 'chaos.repro', 'available', '{}', now() FROM generate_series(1, 5000)`,
		`UPDATE venturi_job SET state = 'running', runs = 1, lease_token = nextval('venturi_lease_token_seq'),
		        lease_expires_at = now() + interval '1 hour', worker_id = 'repro', attempted_at = now()
		 WHERE id IN (SELECT id FROM venturi_job ORDER BY random() LIMIT 300)`,
		`ANALYZE venturi_job`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := pool.Query(ctx, `SELECT id, lease_token, (ctid::text::point)[0]::bigint, (ctid::text::point)[1]::bigint
		FROM venturi_job WHERE state = 'running' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	running, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (reproJob, error) {
		var j reproJob
		return j, r.Scan(&j.id, &j.token, &j.heap[0], &j.heap[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids, relIDs []pgtype.UUID
	var tokens, relTokens []int64
	var release []reproJob
	for i, j := range running {
		ids, tokens = append(ids, j.id), append(tokens, j.token)
		if i%3 == 0 { // the stale part of the prefetch buffer, sorted like the rest
			release = append(release, j)
			relIDs, relTokens = append(relIDs, j.id), append(relTokens, j.token)
		}
	}
	const lease = int64(2_000_000)
	t.Logf("ExtendLeases, %d IDs:\n%s", len(ids), explain(t, ctx, pool, reproExtendLeases, lease, ids, tokens))
	t.Logf("ReleaseUnstarted, %d IDs:\n%s", len(relIDs), explain(t, ctx, pool, reproReleaseUnstarted, relIDs, relTokens))

	// h is the release's first job in the heap. A third session holds it, so that the
	// release waits for it holding nothing, first in line; the extension, in ID order,
	// locks every job below h and waits for h behind the release. When h is free, the
	// release takes it and goes on in heap order to a job below h by ID: the extension
	// has it, and waits for h.
	h := slices.MinFunc(release, func(a, b reproJob) int {
		if heapBefore(a, b) {
			return -1
		}
		return 1
	})
	if h.id == release[0].id {
		t.Fatal("the release's first job in the heap is also its first by ID: no lock order to invert")
	}

	// A third session holds h, so that both statements line up behind it, each holding
	// what its plan's order locked before h.
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background()) //nolint:errcheck // no-op after commit
	if _, err := holder.Exec(ctx, `SELECT 1 FROM venturi_job WHERE id = $1 FOR NO KEY UPDATE`, h.id); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	go func() {
		_, err := pool.Exec(ctx, reproReleaseUnstarted, relIDs, relTokens)
		results <- err
	}()
	const waiting = `(SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND backend_type = 'client backend'
		AND (query LIKE '%%runs = j.runs - 1%%' OR query LIKE '%%SET lease_expires_at = now()%%')) = %d`
	waitUntil(t, ctx, pool, "the release to wait for h", fmt.Sprintf(waiting, 1))
	go func() {
		_, err := pool.Exec(ctx, reproExtendLeases, lease, ids, tokens)
		results <- err
	}()
	waitUntil(t, ctx, pool, "the extension to wait for h", fmt.Sprintf(waiting, 2))
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var errs []error
	for range 2 {
		if err := <-results; err != nil {
			errs = append(errs, err)
		}
	}
	if i := slices.IndexFunc(errs, func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "40P01"
	}); i >= 0 {
		t.Fatalf("the release and the lease extension deadlocked (their plans lock the rows in different orders, see the plans above): %v", errs[i])
	}
	if len(errs) > 0 {
		t.Fatal(errs)
	}
}
