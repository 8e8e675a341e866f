package venturi_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// claimCounter counts a pool's claim batches and maintenance rounds.
type claimCounter struct{ claims, rounds atomic.Int64 }

func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "name: TryMaintenanceLock") {
		c.rounds.Add(1)
	}
	return ctx
}
func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		if strings.Contains(q.SQL, "name: ClaimGated") {
			c.claims.Add(1)
			break
		}
	}
	return ctx
}
func (c *claimCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestIdleWorkerPollsAtItsInterval: a worker with nothing to do claims about once per
// PollInterval, not in a loop. NextDue reported "due now" when nothing was scheduled
// (GREATEST ignores NULLs), so an idle worker claimed again as soon as a claim returned:
// hundreds of round trips a second. The maintenance rounds (MaintenanceInterval, twice the
// poll interval here) are the clock: over 10 of them a polling worker makes about 20
// claims.
func TestIdleWorkerPollsAtItsInterval(t *testing.T) {
	slow(t)
	t.Parallel()
	direct := newDB(t)
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schemaOf(direct)
	var count claimCounter
	cfg.ConnConfig.Tracer = &count
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	wcfg := fastConfig()
	wcfg.PollInterval = 50 * wcfg.MaintenanceInterval / 100 // half the maintenance interval
	w := newWorker(t, pool, holdState{started: make(chan int, 1)}, wcfg)
	venturi.MustRegister[holdTask](w) // never enqueued: the worker idles
	startWorker(t, w)
	eventually(t, within, "ten maintenance rounds", func() bool { return count.rounds.Load() >= 10 })
	if n := count.claims.Load(); n > 60 {
		t.Fatalf("an idle worker made %d claims in 10 maintenance rounds (polling every half round: about 20)", n)
	}
}
