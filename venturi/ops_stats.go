package venturi

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// The stats sampler (migration 13) lives in internal/maintenance (maintenance.Sampler):
// the maintaining worker samples the job table into venturi_stats_kind (the latest sample
// per queue and kind) and venturi_stats_history (one line per queue per sample, 24 hours);
// Queue.Stats and Queue.StatsHistory read only those.

// MaxStatsHistory bounds what one [Queue.StatsHistory] call returns: the newest samples
// are kept when more matched.
const MaxStatsHistory = 100_000

// statsStates are the states a stats row counts, in the order of the sampler's counts
// (maintenance.StatsStates).
var statsStates = [...]State{StateAvailable, StateRunning, StateScheduled, StateWaiting,
	StateCompleted, StateDead, StateCancelled}

// statsIndex is the position of state s in statsStates (-1 for none).
func statsIndex(s string) int {
	for i, st := range statsStates {
		if string(st) == s {
			return i
		}
	}
	return -1
}

// statementTimeoutMs is a statement_timeout setting for d.
func statementTimeoutMs(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// Stats reads the latest stats sample (one row per queue and kind, in one statement):
// queues by name, each with its kinds by name. A queue that has settings but no jobs is
// listed with zero counts. The queues' Paused and Concurrency are their current settings.
// In the same snapshot it reads the enqueues from SQL that wait for a Go merge, by kind
// (Stats.DeferredMerges), from their own table: they are there with or without a sample.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	// In the ops reads' transaction settings (readTx): without JIT above all. The stats tables are
	// tiny, but until autovacuum first analyzes them (a new schema, a restored one) the
	// planner's default estimates price this join past jit_above_cost, and compiling it
	// took 30 ms of a 0.3 ms read (bench scenario 14).
	var rows []*dbsqlc.StatsReadRow
	var deferred []*dbsqlc.StatsDeferredMergesRow
	err := q.readTx(ctx, func(tx pgx.Tx) (err error) {
		if rows, err = q.q.StatsRead(ctx, tx); err != nil {
			return err
		}
		deferred, err = q.q.StatsDeferredMerges(ctx, tx)
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	var s Stats
	for _, d := range deferred {
		s.DeferredMerges = append(s.DeferredMerges, DeferredMergeStats{Kind: d.Kind, Waiting: d.Waiting, Keys: d.Keys,
			Oldest: d.Oldest, OldestAge: time.Duration(d.OldestAgeUs) * time.Microsecond})
	}
	for _, r := range rows {
		if r.SampledAt != nil {
			s.SampledAt = *r.SampledAt
		}
		if n := len(s.Queues); n == 0 || s.Queues[n-1].Queue != r.Queue {
			qs := QueueStats{Queue: r.Queue, Paused: r.Paused, Concurrency: int(r.Concurrency),
				Counts: zeroCounts(), OldestAvailable: r.OldestAvailable, Lag: time.Duration(r.LagUs) * time.Microsecond}
			s.Queues = append(s.Queues, qs)
		}
		qs := &s.Queues[len(s.Queues)-1]
		if !r.Kind.Valid {
			continue
		}
		ks := KindStats{Kind: r.Kind.String, Counts: zeroCounts(),
			CompletedPerSec: r.CompletedPerSec, FailedPerSec: r.FailedPerSec, DeadPerSec: r.DeadPerSec}
		for i, n := range [...]int64{r.Available, r.Running, r.Scheduled, r.Waiting, r.Completed, r.Dead, r.Cancelled} {
			ks.Counts[statsStates[i]] = n
			qs.Counts[statsStates[i]] += n
		}
		qs.CompletedPerSec += ks.CompletedPerSec
		qs.FailedPerSec += ks.FailedPerSec
		qs.DeadPerSec += ks.DeadPerSec
		qs.Kinds = append(qs.Kinds, ks)
	}
	return s, nil
}

// zeroCounts is a Counts map with every state at zero.
func zeroCounts() map[State]int64 {
	m := make(map[State]int64, len(statsStates))
	for _, s := range statsStates {
		m[s] = 0
	}
	return m
}

// StatsHistory returns the samples since the given time (at most the last 24 hours, and at
// most the newest [MaxStatsHistory]), oldest first, by queue within a sample.
func (q *Queue) StatsHistory(ctx context.Context, since time.Time) ([]StatsSample, error) {
	var rows []*dbsqlc.StatsHistoryRow
	err := q.readTx(ctx, func(tx pgx.Tx) (err error) {
		rows, err = q.q.StatsHistory(ctx, tx, dbsqlc.StatsHistoryParams{Since: since, Max: MaxStatsHistory})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]StatsSample, len(rows))
	for i, r := range rows {
		out[len(rows)-1-i] = StatsSample{At: r.At, Queue: r.Queue, Available: r.Available, Running: r.Running,
			Scheduled: r.Scheduled, Waiting: r.Waiting, Lag: time.Duration(r.LagUs) * time.Microsecond,
			CompletedPerSec: r.CompletedPerSec, FailedPerSec: r.FailedPerSec, DeadPerSec: r.DeadPerSec}
	}
	return out, nil
}
