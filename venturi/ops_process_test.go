package venturi_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// samplerProcess runs a worker of the ops tasks that samples the stats fast, until killed
// (VENTURI_TEST_SAMPLER, see TestMain).
func samplerProcess(schema string) int {
	pool, err := childPool(schema)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	wc := statsConfig("sampler-child")
	wc.Logger = slog.New(slog.DiscardHandler)
	w, err := venturi.NewWorker(pool, struct{}{}, wc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	venturi.MustRegister[opsTask](w)
	venturi.MustRegister[opsKind](w)
	if err := w.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// sampledBy reads which worker took the latest sample, and when.
func sampledBy(t *testing.T, pool *pgxpool.Pool) (string, time.Time) {
	t.Helper()
	var who string
	var at time.Time
	if err := pool.QueryRow(context.Background(), `SELECT COALESCE(sampler, ''), COALESCE(sampled_at, 'epoch') FROM venturi_stats_state`).Scan(&who, &at); err != nil {
		t.Fatal(err)
	}
	return who, at
}

// TestStatsSamplerMovesWhenItsProcessDies: a worker process and an in-process worker both
// maintain the schema; the stats are sampled by one of them at a time, at most once per
// interval, and when the process that sampled is killed (SIGKILL: its maintenance lock goes
// with its connections) the other worker samples on, so the stats stay current.
func TestStatsSamplerMovesWhenItsProcessDies(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VENTURI_TEST_SAMPLER="+schemaOf(pool))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	eventually(t, within, "the child process to sample", func() bool { who, _ := sampledBy(t, pool); return who == "sampler-child" })
	startOpsWorker(t, pool, statsConfig("w-local"))
	for i := range 5 {
		enqueue(t, q, opsTask{N: i})
	}
	waitStats(t, q, "5 completed", func(s venturi.Stats) bool {
		return queueStats(s, venturi.DefaultQueue).Counts[venturi.StateCompleted] == 5
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	var killedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&killedAt); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		enqueue(t, q, opsTask{N: 10 + i})
	}
	waitStats(t, q, "8 completed, sampled by the worker left", func(s venturi.Stats) bool {
		who, at := sampledBy(t, pool)
		return who == "w-local" && at.After(killedAt) && queueStats(s, venturi.DefaultQueue).Counts[venturi.StateCompleted] == 8
	})
	hist, err := q.StatsHistory(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(hist); i++ {
		if gap := hist[i].At.Sub(hist[i-1].At); gap > 0 && gap < venturi.MinStatsInterval {
			t.Fatalf("two samples %v apart", gap)
		}
	}
}
