package venturi

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// TestLeaseExtensionBesideAReleaseWaitsForNothing: a worker holds 300 running jobs among
// 5,000 (as after a large claim); its release of stale prefetched jobs takes 100 of them
// and waits for a job a third session holds, keeping the rows it took before that one.
// The lease extension of all 300 beside it must not wait: it extends every run whose row
// nobody holds and reports the held ones (a single held row stalled an extension that
// waited past the worker's leases: chaos/README.md, "Bugs found"). The extension of the
// held ones alone, which waits, must not deadlock with the release: both lock in ID order
// (with UPDATE ... FROM unnest(ids) they took rows in their plans' orders, and deadlocked).
func TestLeaseExtensionBesideAReleaseWaitsForNothing(t *testing.T) {
	t.Parallel()
	testExtensionBeside(t, "ReleaseUnstarted", func(ctx context.Context, db dbsqlc.DBTX, ids []pgtype.UUID, tokens []int64) error {
		_, err := dbsqlc.New().ReleaseUnstarted(ctx, db, dbsqlc.ReleaseUnstartedParams{Ids: ids, Tokens: tokens})
		return err
	}, "available")
}

// TestLeaseExtensionBesideAFinishWaitsForNothing: the same beside a finish of a third of
// the worker's runs. FinishRuns finds its rows by a primary-key scan in ID order (it does
// not lock them first: that would cost the hot path a third more buffers).
func TestLeaseExtensionBesideAFinishWaitsForNothing(t *testing.T) {
	t.Parallel()
	testExtensionBeside(t, "FinishRuns", func(ctx context.Context, db dbsqlc.DBTX, ids []pgtype.UUID, tokens []int64) error {
		p := dbsqlc.FinishRunsParams{Ids: ids, Tokens: tokens}
		for range ids {
			p.States = append(p.States, "completed")
			p.DelaysUs = append(p.DelaysUs, 0)
			p.Failed = append(p.Failed, false)
			p.SetCarry = append(p.SetCarry, false)
			p.Carries = append(p.Carries, "")
			p.Entries = append(p.Entries, `[{"event":"completed","note":"lock order"}]`)
		}
		_, err := dbsqlc.New().FinishRuns(ctx, db, p)
		return err
	}, "completed")
}

// testExtensionBeside runs other (a statement named name that ends a third of a worker's
// runs, leaving them in state) beside the lease extension of all of them, as the tests
// above describe.
func testExtensionBeside(t *testing.T, name string, other func(ctx context.Context, db dbsqlc.DBTX, ids []pgtype.UUID, tokens []int64) error, state string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := testdb.Pool(t, testdb.Schema(t), 8)
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO venturi_job (id, kind, state, payload, run_at)
		 SELECT gen_random_uuid(), 'lockorder', 'available', '{}', now() FROM generate_series(1, 5000)`,
		`UPDATE venturi_job SET state = 'running', runs = 1, lease_token = nextval('venturi_lease_token_seq'),
		        lease_expires_at = now() + interval '1 hour', worker_id = 'w', attempted_at = now()
		 WHERE id IN (SELECT id FROM venturi_job ORDER BY random() LIMIT 300)`,
		`ANALYZE venturi_job`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	type job struct {
		id          pgtype.UUID
		token       int64
		block, item int64 // ctid
	}
	rows, err := pool.Query(ctx, `SELECT id, lease_token, (ctid::text::point)[0]::bigint, (ctid::text::point)[1]::bigint
		FROM venturi_job WHERE state = 'running' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	running, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job, error) {
		var j job
		return j, r.Scan(&j.id, &j.token, &j.block, &j.item)
	})
	if err != nil {
		t.Fatal(err)
	}
	var ext dbsqlc.ExtendLeasesParams
	var rel struct {
		Ids    []pgtype.UUID
		Tokens []int64
	}
	var release []job
	ext.LeaseUs = delayOf(2 * time.Second)
	for i, j := range running {
		ext.Ids, ext.Tokens = append(ext.Ids, j.id), append(ext.Tokens, j.token)
		if i%3 == 0 { // the stale part of the prefetch buffer, sorted like the rest
			release = append(release, j)
			rel.Ids, rel.Tokens = append(rel.Ids, j.id), append(rel.Tokens, j.token)
		}
	}
	// h is the release's first job in the heap: in heap order, the release takes h first
	// and then jobs below it by ID, which an extension in ID order takes before h. The
	// jobs are random, so h may also be the release's first by ID (about one run in a
	// hundred): then there is no order to invert, and the release leaves that job out.
	var h job
	for {
		h = slices.MinFunc(release, func(a, b job) int {
			if a.block != b.block {
				return int(a.block - b.block)
			}
			return int(a.item - b.item)
		})
		if h.id != release[0].id {
			break
		}
		release, rel.Ids, rel.Tokens = release[1:], rel.Ids[1:], rel.Tokens[1:]
		if len(release) < 2 {
			t.Fatal("no two released jobs whose heap and ID orders differ")
		}
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(ctx, `SELECT 1 FROM venturi_job WHERE id = $1 FOR NO KEY UPDATE`, h.id); err != nil {
		t.Fatal(err)
	}
	q := dbsqlc.New()
	waiting := func(n int) {
		t.Helper()
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var got int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND backend_type = 'client backend' AND datname = current_database()
				  AND (query LIKE '%name: ExtendHeldLeases%' OR query LIKE '%name: ' || $1 || '%')`, name).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got >= n {
				return
			}
			select {
			case <-deadline.C:
				t.Fatalf("timed out waiting for %d statements to wait for the held job", n)
			case <-tick.C:
			}
		}
	}
	results := make(chan error, 2)
	go func() { results <- other(ctx, pool, rel.Ids, rel.Tokens) }()
	waiting(1)
	// The extension returns while the holder and the other statement still hold their
	// rows: it waits for no lock (the statement timeout fails the test if it does).
	ectx, ecancel := context.WithTimeout(ctx, 20*time.Second)
	got, err := q.ExtendLeases(ectx, pool, ext)
	ecancel()
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40P01" {
			t.Fatalf("%s and the lease extension deadlocked: %v", name, err)
		}
		t.Fatalf("lease extension beside %s: %v", name, err)
	}
	releasing := map[pgtype.UUID]bool{}
	for _, id := range rel.Ids {
		releasing[id] = true
	}
	notExtended := 0
	for _, r := range got {
		switch {
		case !r.Extended && !releasing[r.ID]:
			t.Errorf("job %x not extended, and nobody else held it", r.ID.Bytes)
		case !r.Extended:
			notExtended++
		}
	}
	if len(got) != len(ext.Ids) || notExtended == 0 {
		t.Fatalf("the extension reported %d of %d runs, %d of them held; want all, some held", len(got), len(ext.Ids), notExtended)
	}
	// The worker then extends the held ones alone, waiting for them (ExtendHeldLeases):
	// in ID order, so that it and the other statement, both waiting, do not deadlock.
	heldP := dbsqlc.ExtendHeldLeasesParams{LeaseUs: ext.LeaseUs}
	heldIDs := map[pgtype.UUID]bool{}
	for _, r := range got {
		heldIDs[r.ID] = !r.Extended
	}
	for i, id := range ext.Ids {
		if heldIDs[id] {
			heldP.Ids, heldP.Tokens = append(heldP.Ids, id), append(heldP.Tokens, ext.Tokens[i])
		}
	}
	go func() { _, err := q.ExtendHeldLeases(ctx, pool, heldP); results <- err }()
	waiting(2)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-results; err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "40P01" {
				t.Fatalf("%s and the extension of the held leases deadlocked: %v", name, err)
			}
			t.Fatal(err)
		}
	}
	var released, extended int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = $2::venturi_job_state AND id = ANY($1)),
		count(*) FILTER (WHERE state = 'running' AND lease_expires_at < now() + interval '1 minute')
		FROM venturi_job`, rel.Ids, state).Scan(&released, &extended); err != nil {
		t.Fatal(err)
	}
	// The ended jobs are in their new state (those the extension took first were waited
	// for), and the extension's others hold the new, shorter lease.
	if released != len(rel.Ids) || extended != len(ext.Ids)-len(rel.Ids) {
		t.Fatalf("%s ended %d of %d, the extension extended %d of %d", name, released, len(rel.Ids), extended, len(ext.Ids)-len(rel.Ids))
	}
}
