package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/maintenance"
)

// TestCombineSampleKeepsCountsAndRates: the finished counts carry over from the previous
// sample plus what finished in the window (or come from a recount); the rates are the
// window's per second; FailedPerSec is the growth of the unfinished jobs' failures plus
// those that left with finished jobs, less the deaths; jobs finishing inside the commit
// margin count as unfinished; empty lines are dropped.
func TestCombineSampleKeepsCountsAndRates(t *testing.T) {
	t.Parallel()
	old := []*dbsqlc.StatsKindsRow{
		{Queue: "q", Kind: "a", Completed: 100, Dead: 5, Cancelled: 1, PendingFailures: 10},
		{Queue: "q", Kind: "gone"}, // nothing left: dropped
	}
	due := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pending := []*dbsqlc.StatsPendingRow{
		{Queue: "q", Kind: "a", State: "available", Jobs: 3, Failures: 4, Oldest: due},
		{Queue: "q", Kind: "a", State: "scheduled", Jobs: 2, Failures: 6, Oldest: due.Add(-time.Hour)}, // not an available job
		{Queue: "q", Kind: "a", State: "running", Jobs: 1, Failures: 1},
	}
	window := []*dbsqlc.StatsFinishedRow{
		{Queue: "q", Kind: "a", State: "completed", Jobs: 20, Failures: 4},
		{Queue: "q", Kind: "a", State: "dead", Jobs: 2, Failures: 50},
		{Queue: "q", Kind: "a", State: "completed", Jobs: 1, Failures: 3, Recent: true},
		{Queue: "q", Kind: "a", State: "dead", Jobs: 1, Failures: 25, Recent: true},
	}
	key := maintenance.StatsKey{Queue: "q", Kind: "a"}
	lines := maintenance.CombineSample(old, pending, window, nil, false, 2)
	if len(lines) != 1 {
		t.Fatalf("lines %v", lines)
	}
	l := lines[key]
	if l.Counts != (maintenance.StatsCounts{3, 1, 2, 0, 120, 7, 1}) || l.Oldest == nil || !l.Oldest.Equal(due) {
		t.Fatalf("line %+v", l)
	}
	// Unfinished failures: 4+6+1 = 11, plus the recent ones (3 + 25 - 1) = 38; previous 10.
	// Failed: 38 - 10 + (4 + 50) - 2 = 80 over 2 seconds.
	if l.PendingFailures != 38 || l.CompletedPerSec != 10 || l.DeadPerSec != 1 || l.FailedPerSec != 40 {
		t.Fatalf("rates %+v", l)
	}
	// A recount replaces the carried finished counts; no window, no rates.
	recount := []*dbsqlc.StatsFinishedRow{{Queue: "q", Kind: "a", State: "completed", Jobs: 90}}
	l = maintenance.CombineSample(old, pending, nil, recount, true, 0)[key]
	if l.Counts != (maintenance.StatsCounts{3, 1, 2, 0, 90, 0, 0}) || l.CompletedPerSec != 0 || l.FailedPerSec != 0 {
		t.Fatalf("recounted line %+v", l)
	}
	// Failures that shrink (a retry forgot them) give no negative rate.
	l = maintenance.CombineSample([]*dbsqlc.StatsKindsRow{{Queue: "q", Kind: "a", PendingFailures: 500}}, pending, nil, nil, false, 1)[key]
	if l.FailedPerSec != 0 {
		t.Fatalf("negative failures: %+v", l)
	}
}

// TestSamplerWritesTheCountsOfOnePass: one pass over jobs in a few states writes their
// counts by queue and kind (the finished ones through the first sample's recount), the
// queue's history line and the sampler's state; a second pass finds the next sample not
// due yet.
func TestSamplerWritesTheCountsOfOnePass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, finished_at, failures) VALUES
		(gen_random_uuid(), 'a', 'default', 'available', '{}', now() - interval '1 minute', NULL, 2),
		(gen_random_uuid(), 'a', 'default', 'available', '{}', now(), NULL, 0),
		(gen_random_uuid(), 'a', 'default', 'scheduled', '{}', now() + interval '1 hour', NULL, 0),
		(gen_random_uuid(), 'a', 'default', 'completed', '{}', now() - interval '2 hours', now() - interval '1 hour', 0),
		(gen_random_uuid(), 'b', 'other', 'dead', '{}', now() - interval '2 hours', now() - interval '1 hour', 3)`)
	s := maintenance.NewSampler(maintenance.SamplerConfig{
		Interval: time.Hour, ID: "w1", Logger: b.log,
		InTx: func(ctx context.Context, fn func(pgx.Tx) error) error {
			return pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, fn)
		},
	}, b.q)
	wait, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("sample: %v", err)
	}
	if wait != time.Hour {
		t.Errorf("wait after a sample %v, want the interval (1h)", wait)
	}

	rows, err := b.pool.Query(context.Background(), `SELECT queue, kind, available, running, scheduled, waiting,
		completed, dead, cancelled, pending_failures, oldest_available IS NOT NULL FROM venturi_stats_kind ORDER BY queue, kind`)
	if err != nil {
		t.Fatal(err)
	}
	type kindRow struct {
		queue, kind     string
		counts          maintenance.StatsCounts
		pendingFailures int64
		oldest          bool
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (k kindRow, err error) {
		c := &k.counts
		err = r.Scan(&k.queue, &k.kind, &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &k.pendingFailures, &k.oldest)
		return k, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []kindRow{
		{queue: "default", kind: "a", counts: maintenance.StatsCounts{2, 0, 1, 0, 1, 0, 0}, pendingFailures: 2, oldest: true},
		{queue: "other", kind: "b", counts: maintenance.StatsCounts{0, 0, 0, 0, 0, 1, 0}},
	}
	if len(got) != len(want) {
		t.Fatalf("venturi_stats_kind %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("venturi_stats_kind row %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	var queue string
	var available, scheduled int64
	if err := b.pool.QueryRow(context.Background(),
		`SELECT queue, available, scheduled FROM venturi_stats_history WHERE queue = 'default'`).Scan(&queue, &available, &scheduled); err != nil {
		t.Fatalf("history of default: %v", err)
	}
	if available != 2 || scheduled != 1 {
		t.Errorf("history of default: available %d, scheduled %d; want 2 and 1", available, scheduled)
	}
	var sampler string
	var sampled bool
	if err := b.pool.QueryRow(context.Background(),
		`SELECT sampler, sampled_at IS NOT NULL AND recounted_at IS NOT NULL FROM venturi_stats_state`).Scan(&sampler, &sampled); err != nil {
		t.Fatal(err)
	}
	if sampler != "w1" || !sampled {
		t.Errorf("venturi_stats_state: sampler %q, sampled and recounted %v; want w1, true", sampler, sampled)
	}

	wait, err = s.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("second sample: %v", err)
	}
	var samples int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(DISTINCT at) FROM venturi_stats_history`).Scan(&samples); err != nil {
		t.Fatal(err)
	}
	if wait <= 0 || wait > time.Hour || samples != 1 {
		t.Errorf("second pass: wait %v, %d samples; want a wait within the interval and still 1 sample", wait, samples)
	}
}

// TestStretchedKeepsTheSamplerUnderItsShare: a task that costs more than its share
// stretches its period to keep under it.
func TestStretchedKeepsTheSamplerUnderItsShare(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ every, cost, want time.Duration }{
		{5 * time.Second, 10 * time.Millisecond, 5 * time.Second},
		{5 * time.Second, time.Second, 20 * time.Second},
		{maintenance.StatsRecountEvery, time.Minute, 20 * time.Minute},
	} {
		if got := maintenance.Stretched(tt.every, tt.cost); got != tt.want {
			t.Errorf("Stretched(%v, %v) = %v, want %v", tt.every, tt.cost, got, tt.want)
		}
	}
}
