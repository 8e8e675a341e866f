package leases_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/leases"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// run is one run the test tracker holds: its job's ID and the lease token it claimed.
type run struct {
	id    ulid.ULID
	token int64
}

// testTracker is a leases.Tracker over a fixed list of runs that records what the
// extender reports.
type testTracker struct {
	runs     []run
	found    map[ulid.ULID]bool // Extended's found; nil until it is called
	stops    map[ulid.ULID]string
	extended int // calls of Extended
}

// Leased implements leases.Tracker.
func (t *testTracker) Leased(p *dbsqlc.ExtendLeasesParams) {
	for _, r := range t.runs {
		p.Ids = append(p.Ids, pgtype.UUID{Bytes: r.id, Valid: true})
		p.Tokens = append(p.Tokens, r.token)
	}
}

// Extended implements leases.Tracker.
func (t *testTracker) Extended(found map[ulid.ULID]bool, _ time.Time) {
	t.found = found
	t.extended++
}

// RequestStop implements leases.Tracker.
func (t *testTracker) RequestStop(id ulid.ULID, ev string) {
	if t.stops == nil {
		t.stops = map[ulid.ULID]string{}
	}
	t.stops[id] = ev
}

// Enforce implements leases.Tracker; one extension pass does not call it.
func (t *testTracker) Enforce(time.Duration, time.Duration) {}

// testBundle is what every test of the package works with: a pool on a fresh, migrated
// schema.
type testBundle struct {
	pool *pgxpool.Pool
}

// setup returns a bundle on a schema of the test's own.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 4)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &testBundle{pool: pool}
}

// insertRunning inserts a running job of kind whose lease expires in a minute, with
// stopEvent ("": none), and returns it as a run.
func (b *testBundle) insertRunning(t *testing.T, kind, stopEvent string) run {
	t.Helper()
	r := run{id: ulid.Make()}
	err := b.pool.QueryRow(context.Background(), `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at,
		runs, lease_token, lease_expires_at, worker_id, attempted_at, stop_event, stop_requested_at)
		VALUES ($1, $2, 'default', 'running', '{}', now(), 1, nextval('venturi_lease_token_seq'),
		        now() + interval '1 minute', 'w1', now(), NULLIF($3, ''), CASE WHEN $3 = '' THEN NULL ELSE now() END)
		RETURNING lease_token`,
		pgtype.UUID{Bytes: r.id, Valid: true}, kind, stopEvent).Scan(&r.token)
	if err != nil {
		t.Fatalf("insert %s: %v", kind, err)
	}
	return r
}

// leaseLeft returns how long the lease of the job of kind has left, by the database clock.
func (b *testBundle) leaseLeft(t *testing.T, kind string) time.Duration {
	t.Helper()
	var us int64
	err := b.pool.QueryRow(context.Background(),
		`SELECT (extract(epoch FROM lease_expires_at - now()) * 1e6)::bigint FROM venturi_job WHERE kind = $1`,
		kind).Scan(&us)
	if err != nil {
		t.Fatalf("lease of %s: %v", kind, err)
	}
	return time.Duration(us) * time.Microsecond
}

// newExtender returns an extender with a lease of an hour over tracker, sending on the
// bundle's pool.
func (b *testBundle) newExtender(tracker leases.Tracker) *leases.Extender {
	return leases.NewExtender(leases.Config{Lease: time.Hour, Logger: b.logger(), Tracker: tracker, Send: b.send})
}

// logger discards what the extender logs.
func (b *testBundle) logger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// send is the worker's leases.SendFunc on the bundle's pool.
func (b *testBundle) send(ctx context.Context, queue func(*pgx.Batch)) error {
	batch := &pgx.Batch{}
	dbsqlc.QueueSetLocalIndexScans(batch)
	queue(batch)
	return b.pool.SendBatch(ctx, batch).Close()
}

// TestExtender runs extension passes against running jobs set up in the schema.
func TestExtender(t *testing.T) {
	t.Parallel()

	t.Run("AMatchingTokenIsExtendedAndAStaleOneIsFenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		live := b.insertRunning(t, "live", "")
		stale := b.insertRunning(t, "stale", "")
		stale.token++ // the job was claimed again under a newer token
		tr := &testTracker{runs: []run{live, stale}}
		b.newExtender(tr).RunOnce(context.Background())
		if tr.extended != 1 {
			t.Fatalf("Extended called %d times, want 1", tr.extended)
		}
		if !tr.found[live.id] {
			t.Errorf("live run not extended: %v", tr.found)
		}
		if _, found := tr.found[stale.id]; found {
			t.Errorf("stale run found; want it fenced")
		}
		if left := b.leaseLeft(t, "live"); left < 30*time.Minute {
			t.Errorf("live lease has %v left, want about an hour", left)
		}
		if left := b.leaseLeft(t, "stale"); left > 2*time.Minute {
			t.Errorf("stale lease has %v left, want it untouched (about a minute)", left)
		}
		if len(tr.stops) != 0 {
			t.Errorf("stops requested: %v, want none", tr.stops)
		}
	})

	t.Run("AStopEventIsReported", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.insertRunning(t, "cancelled", "cancelled")
		tr := &testTracker{runs: []run{r}}
		b.newExtender(tr).RunOnce(context.Background())
		if !tr.found[r.id] {
			t.Errorf("run not extended: %v", tr.found)
		}
		if got := tr.stops[r.id]; got != "cancelled" {
			t.Errorf("stop event %q, want cancelled", got)
		}
	})

	t.Run("ARowHeldByAnotherTransactionStallsNoOtherRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		live := b.insertRunning(t, "live", "")
		held := b.insertRunning(t, "held", "")
		// Another transaction holds the held job's row, as a handler's transaction does
		// between Run.CompleteTx and its COMMIT.
		ctx := context.Background()
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `UPDATE venturi_job SET stop_note = 'held' WHERE kind = 'held'`); err != nil {
			t.Fatal(err)
		}
		tr := &testTracker{runs: []run{held, live}}
		// A lease of two seconds gives the statement one: before, it waited for the held
		// row until then, and extended nothing.
		e := leases.NewExtender(leases.Config{Lease: 2 * time.Second, Logger: b.logger(), Tracker: tr, Send: b.send})
		e.RunOnce(ctx)
		if tr.extended != 1 {
			t.Fatalf("Extended called %d times, want 1", tr.extended)
		}
		if extended, found := tr.found[live.id]; !found || !extended {
			t.Errorf("live run: extended %v, found %v; want extended", extended, found)
		}
		if extended, found := tr.found[held.id]; !found || extended {
			t.Errorf("held run: extended %v, found %v; want found and not extended (its lease stands)", extended, found)
		}
		if left := b.leaseLeft(t, "held"); left > 2*time.Minute {
			t.Errorf("held lease has %v left, want it untouched (about a minute)", left)
		}
	})

	t.Run("ARowHeldBrieflyIsExtendedOnceReleased", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		live := b.insertRunning(t, "live", "")
		held := b.insertRunning(t, "held", "")
		ctx := context.Background()
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `UPDATE venturi_job SET stop_note = 'held' WHERE kind = 'held'`); err != nil {
			_ = tx.Rollback(ctx)
			t.Fatal(err)
		}
		// Release the row once the extension waits for it.
		released := make(chan struct{})
		go func() {
			defer close(released)
			defer func() { _ = tx.Rollback(ctx) }()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for range tick.C {
				var waiting bool
				err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%name: ExtendHeldLeases%' AND datname = current_database())`).Scan(&waiting)
				if err != nil || waiting {
					return
				}
			}
		}()
		tr := &testTracker{runs: []run{held, live}}
		b.newExtender(tr).RunOnce(ctx)
		<-released
		for _, r := range []run{live, held} {
			if extended, found := tr.found[r.id]; !found || !extended {
				t.Errorf("run %s: extended %v, found %v; want extended", r.id, extended, found)
			}
		}
		if left := b.leaseLeft(t, "held"); left < 30*time.Minute {
			t.Errorf("held lease has %v left, want about an hour", left)
		}
	})

	t.Run("NoRunsSendNothing", func(t *testing.T) {
		t.Parallel()
		tr := &testTracker{}
		e := leases.NewExtender(leases.Config{
			Lease: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tracker: tr,
			Send: func(context.Context, func(*pgx.Batch)) error {
				t.Error("a statement was sent for no runs")
				return nil
			},
		})
		e.RunOnce(context.Background())
		if tr.extended != 0 {
			t.Errorf("Extended called %d times, want 0", tr.extended)
		}
	})
}
