package venturi_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// TestStatsSampledByOneOfTwoWorkers: with two workers on one schema, samples are taken
// once per interval between them (the maintenance lock and the stats state decide), by
// one of them; the counts per queue and kind, the lag of a paused queue's jobs and the
// rates (integrated over the samples: every completion, retried failure and death counted
// once) come out of the stats table.
func TestStatsSampledByOneOfTwoWorkers(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	if err := q.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	// The paused queue's jobs first: from the first sample that counts them on, every
	// sample has a line (a sample with no line leaves no history, and the rates below
	// would be integrated over its interval too).
	if _, err := q.EnqueueMany(ctx, []venturi.Task{opsTask{N: 300, Q: "held"}, opsTask{N: 301, Q: "held"}}); err != nil {
		t.Fatal(err)
	}
	startOpsWorker(t, pool, statsConfig("w1"))
	startOpsWorker(t, pool, statsConfig("w2"))
	first := waitStats(t, q, "a first sample counting the paused queue's jobs", func(s venturi.Stats) bool {
		return queueStats(s, "held").Counts[venturi.StateAvailable] == 2
	})

	var tasks []venturi.Task
	for i := range 10 {
		tasks = append(tasks, opsTask{N: i})
	}
	for i := range 4 {
		tasks = append(tasks, opsTask{N: 100 + i, Q: "media", Fail: 1, Dead: true})
	}
	for i := range 3 {
		tasks = append(tasks, opsTask{N: 200 + i, Fail: 2}) // two retried failures, then completes
	}
	for i := range 5 {
		tasks = append(tasks, opsKind{N: i})
	}
	if _, err := q.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	s := waitStats(t, q, "every job counted", func(s venturi.Stats) bool {
		d, m, h := queueStats(s, venturi.DefaultQueue), queueStats(s, "media"), queueStats(s, "held")
		return d.Counts[venturi.StateCompleted] == 18 && m.Counts[venturi.StateDead] == 4 && h.Counts[venturi.StateAvailable] == 2
	})
	d, h := queueStats(s, venturi.DefaultQueue), queueStats(s, "held")
	if len(d.Kinds) != 2 || d.Kinds[0].Kind != "ops" || d.Kinds[0].Counts[venturi.StateCompleted] != 13 ||
		d.Kinds[1].Kind != "ops_other" || d.Kinds[1].Counts[venturi.StateCompleted] != 5 {
		t.Fatalf("default queue's kinds: %+v", d.Kinds)
	}
	if !h.Paused || h.OldestAvailable == nil || h.Lag <= 0 || h.Lag != s.SampledAt.Sub(*h.OldestAvailable).Truncate(time.Microsecond) {
		t.Fatalf("held queue: paused %v, oldest %v, lag %v (sampled at %v)", h.Paused, h.OldestAvailable, h.Lag, s.SampledAt)
	}
	if d.Lag != 0 || d.OldestAvailable != nil {
		t.Fatalf("default queue has nothing available, yet lag %v, oldest %v", d.Lag, d.OldestAvailable)
	}

	hist, err := q.StatsHistory(ctx, first.SampledAt)
	if err != nil {
		t.Fatal(err)
	}
	// Samples are at least StatsInterval apart whichever worker took them.
	var ats []time.Time
	for _, h := range hist {
		if n := len(ats); n == 0 || !ats[n-1].Equal(h.At) {
			ats = append(ats, h.At)
		}
	}
	for i := 1; i < len(ats); i++ {
		if gap := ats[i].Sub(ats[i-1]); gap < venturi.MinStatsInterval {
			t.Fatalf("samples %v and %v only %v apart", ats[i-1], ats[i], gap)
		}
	}
	var sampler string
	if err := pool.QueryRow(ctx, `SELECT sampler FROM venturi_stats_state`).Scan(&sampler); err != nil || (sampler != "w1" && sampler != "w2") {
		t.Fatalf("sampler %q, %v", sampler, err)
	}
	// Each rate times its sample's interval counts events: every one counted once. (A
	// queue has a line in the samples in which it has jobs or rates.)
	sum := map[string]float64{}
	prev := first.SampledAt
	for i, h := range hist {
		if i > 0 && h.At.After(hist[i-1].At) {
			prev = hist[i-1].At
		}
		secs := h.At.Sub(prev).Seconds()
		sum[h.Queue+" completed"] += h.CompletedPerSec * secs
		sum[h.Queue+" failed"] += h.FailedPerSec * secs
		sum[h.Queue+" dead"] += h.DeadPerSec * secs
	}
	for k, want := range map[string]float64{"default completed": 18, "default failed": 6, "default dead": 0,
		"media completed": 0, "media failed": 0, "media dead": 4} {
		if math.Abs(sum[k]-want) > 0.01 {
			t.Errorf("%s over the samples: %.3f, want %v (history %+v)", k, sum[k], want, hist)
		}
	}
}

// TestStatsForgetRetriedAndPrunedJobs: the finished counts are kept incrementally, without
// a recount: a bulk retry takes its dead jobs out of the dead count in its transaction (it
// moves them back out of the history), and retention takes the jobs of a partition it
// drops out of the completed count.
func TestStatsForgetRetriedAndPrunedJobs(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	// Completed jobs are kept fifteen seconds, dead ones thirty, in partitions of two:
	// long enough for a sample to count the retried jobs' completions (under load a sample
	// can come seconds late) before their partitions are dropped, short enough for the drop
	// to come within the wait.
	cfg := statsConfig("w")
	cfg.RetainCompleted, cfg.RetainDead, cfg.HistoryPartition = 15*time.Second, 30*time.Second, 2*time.Second
	startOpsWorker(t, pool, cfg)
	for i := range 6 {
		enqueue(t, q, opsTask{N: i, Fail: 1, Dead: true}) // dead at its first run, completes at its second
	}
	waitStats(t, q, "6 dead", func(s venturi.Stats) bool { return queueStats(s, "default").Counts[venturi.StateDead] == 6 })
	var recounted time.Time
	if err := pool.QueryRow(ctx, `SELECT recounted_at FROM venturi_stats_state`).Scan(&recounted); err != nil {
		t.Fatal(err)
	}
	res, err := q.RetryJobs(ctx, mustFilter(t, "state:dead"), venturi.BulkOptions{Limit: 2})
	if err != nil || res.Changed != 2 || !res.More {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	var last venturi.Stats
	ok := eventuallyOK(within, func() bool {
		last = readStats(t, q)
		c := queueStats(last, "default").Counts
		return c[venturi.StateDead] == 4 && c[venturi.StateCompleted] == 2
	})
	if !ok {
		var states, partitions, stats string
		_ = pool.QueryRow(ctx, `SELECT string_agg(state::text || coalesce(' ' || finished_at::text, ''), ', ') FROM venturi_job_all`).Scan(&states)
		_ = pool.QueryRow(ctx, `SELECT string_agg(lane || ':' || lo::time || '-' || hi::time, ' ' ORDER BY lane, lo) FROM venturi_history_partition`).Scan(&partitions)
		_ = pool.QueryRow(ctx, `SELECT now()::text || ' counted through ' || coalesce(counted_through::text, '-') || ' sampled ' || coalesce(sampled_at::text, '-') FROM venturi_stats_state`).Scan(&stats)
		t.Fatalf("stats never showed 4 dead, 2 completed: %+v\njobs: %s\npartitions: %s\nstats state: %s",
			queueStats(last, "default").Counts, states, partitions, stats)
	}
	// Their retention ends: retention drops their partitions, and takes them out of the
	// counts as it does.
	waitStats(t, q, "the completed jobs pruned", func(s venturi.Stats) bool {
		c := queueStats(s, "default").Counts
		return c[venturi.StateDead] == 4 && c[venturi.StateCompleted] == 0
	})
	if n := countJobs(t, pool, "state = 'completed'"); n != 0 {
		t.Fatalf("%d completed jobs left", n)
	}
	var again time.Time
	if err := pool.QueryRow(ctx, `SELECT recounted_at FROM venturi_stats_state`).Scan(&again); err != nil || !again.Equal(recounted) {
		t.Fatalf("a recount ran (%v, then %v, %v): the counts were to be kept without one", recounted, again, err)
	}
}

// TestStatsWithoutSample: before any worker sampled, Stats is empty but lists the queues
// that have settings.
func TestStatsWithoutSample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, q := newQueue(t)
	enqueue(t, q, opsTask{})
	if err := q.SetQueueConcurrency(ctx, "limited", 3); err != nil {
		t.Fatal(err)
	}
	s := readStats(t, q)
	if !s.SampledAt.IsZero() || len(s.Queues) != 1 || s.Queues[0].Queue != "limited" || s.Queues[0].Concurrency != 3 ||
		len(s.Queues[0].Counts) != 7 || s.Queues[0].Counts[venturi.StateAvailable] != 0 {
		t.Fatalf("stats before a sample: %+v", s)
	}
	hist, err := q.StatsHistory(ctx, time.Time{})
	if err != nil || len(hist) != 0 {
		t.Fatalf("history: %v, %v", hist, err)
	}
}

// TestStatsHistoryKeeps24Hours: the maintainer deletes samples older than a day, and
// StatsHistory never returns them.
func TestStatsHistoryKeeps24Hours(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO venturi_stats_history (at, queue, available, running, scheduled, waiting, lag_us,
		                                   completed_per_sec, failed_per_sec, dead_per_sec)
		SELECT now() - h * interval '1 hour', 'old', 1, 0, 0, 0, 0, 0, 0, 0 FROM generate_series(1, 30) h`); err != nil {
		t.Fatal(err)
	}
	hist, err := q.StatsHistory(ctx, time.Time{})
	if err != nil || len(hist) != 23 || !slices.IsSortedFunc(hist, func(a, b venturi.StatsSample) int { return a.At.Compare(b.At) }) {
		t.Fatalf("history: %d samples, %v", len(hist), err)
	}
	startOpsWorker(t, pool, statsConfig("w"))
	eventually(t, within, "old samples pruned", func() bool {
		return countRows(t, pool, "venturi_stats_history WHERE at < now() - interval '24 hours'") == 0
	})
	if n := countRows(t, pool, "venturi_stats_history WHERE queue = 'old'"); n != 23 {
		t.Fatalf("%d samples of the last day left, want 23", n)
	}
}

// TestStatsDeferredMerges: Stats lists, by kind, the enqueues from SQL that wait for a Go
// merge (with or without a stats sample): how many, of how many keys, and the oldest one's
// age by the database clock; once a worker that registered the kind applies them, its line
// is gone, while a kind no worker registered keeps its own.
func TestStatsDeferredMerges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	if s := readStats(t, q); len(s.DeferredMerges) != 0 || !s.SampledAt.IsZero() {
		t.Fatalf("a new schema: %+v", s)
	}
	// No worker registered sql_counter (its merge is Go code) nor ops_unknown yet: the first
	// enqueue of a key inserts, each later one waits for a Go merge.
	for _, c := range []struct{ kind, key string }{
		{"sql_counter", "a"}, {"sql_counter", "a"}, {"sql_counter", "a"}, {"sql_counter", "b"}, {"sql_counter", "b"},
		{"ops_unknown", "x"}, {"ops_unknown", "x"},
	} {
		if _, err := pool.Exec(ctx, `SELECT venturi_enqueue($1, '{"key": "k", "n": 1}', dedup_key => $2)`, c.kind, c.key); err != nil {
			t.Fatal(err)
		}
	}
	var backdated time.Time
	if err := pool.QueryRow(ctx, `UPDATE venturi_deferred_merge SET created_at = now() - interval '90 seconds'
		WHERE seq = (SELECT min(seq) FROM venturi_deferred_merge WHERE kind = 'sql_counter') RETURNING created_at`).Scan(&backdated); err != nil {
		t.Fatal(err)
	}
	s := readStats(t, q)
	if len(s.DeferredMerges) != 2 {
		t.Fatalf("deferred merges: %+v, want a line for each kind", s.DeferredMerges)
	}
	unknown, counter := s.DeferredMerges[0], s.DeferredMerges[1]
	if counter.Kind != "sql_counter" || counter.Waiting != 3 || counter.Keys != 2 || !counter.Oldest.Equal(backdated) ||
		counter.OldestAge < 90*time.Second || counter.OldestAge > time.Hour {
		t.Fatalf("sql_counter: %+v, want 3 waiting of 2 keys, the oldest enqueued at %v, 90s or more ago", counter, backdated)
	}
	if unknown.Kind != "ops_unknown" || unknown.Waiting != 1 || unknown.Keys != 1 || unknown.OldestAge < 0 || unknown.OldestAge > time.Hour {
		t.Fatalf("ops_unknown: %+v, want 1 waiting of 1 key", unknown)
	}

	// A worker that registered sql_counter merges its enqueues; ops_unknown's stays.
	sqlWorker(t, pool, &sqlApp{})
	s = waitStats(t, q, "sql_counter's deferred merges applied", func(s venturi.Stats) bool {
		return len(s.DeferredMerges) == 1
	})
	if d := s.DeferredMerges[0]; d.Kind != "ops_unknown" || d.Waiting != 1 {
		t.Fatalf("after the worker's merges: %+v", s.DeferredMerges)
	}
}
