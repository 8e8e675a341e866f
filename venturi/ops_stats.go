package venturi

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// The stats sampler (migration 13). The maintaining worker samples the job table into
// venturi_stats_kind (the latest sample per queue and kind) and venturi_stats_history
// (one line per queue per sample, 24 hours); Queue.Stats and Queue.StatsHistory read only
// those. What one sample costs, at any table size:
//
//   - the unfinished jobs (available, running, scheduled, waiting) are counted through
//     their partial indexes: a pass proportional to the backlog, not to the table;
//   - the finished jobs (completed, dead, cancelled), the bulk of a large table, are not
//     counted: the sample adds those that finished since the previous sample (the
//     finished indexes, a range scan over the interval), and the statements that remove
//     finished jobs subtract them in their own transaction (venturi_stats_forget);
//   - a full recount of the finished jobs, every statsRecountEvery or more, corrects what
//     drifted (jobs removed by workers of an older version, finishing transactions that
//     committed after a sample had passed their finished_at).
//
// A sample that takes long stretches the interval to statsCostFactor times its cost (and
// a recount its period the same way), so sampling stays under about 1/statsCostFactor of
// one database backend however large the table grows.
const (
	// statsRecountEvery is the shortest period between two full recounts of the finished
	// jobs.
	statsRecountEvery = 10 * time.Minute
	// statsCommitMargin: a sample counts the jobs that finished up to this long before
	// it, so that a finishing transaction still committing at the sample's time (its
	// finished_at is its start) is counted by the next sample instead of being missed.
	statsCommitMargin = time.Second
	// statsCostFactor bounds the sampler's share of one backend to about 1/statsCostFactor.
	statsCostFactor = 20
	// statsStatementTimeout bounds each statement of a sample.
	statsStatementTimeout = time.Minute
	// statsPruneBatch is the most history lines one sample deletes past 24 hours.
	statsPruneBatch = 5000
)

// MaxStatsHistory bounds what one [Queue.StatsHistory] call returns: the newest samples
// are kept when more matched.
const MaxStatsHistory = 100_000

// statsStates are the states a stats row counts, in the order of statsCounts.
var statsStates = [...]State{StateAvailable, StateRunning, StateScheduled, StateWaiting,
	StateCompleted, StateDead, StateCancelled}

// statsCounts holds job counts in the order of statsStates.
type statsCounts [len(statsStates)]int64

// statsIndex is the position of state s in statsStates (-1 for none).
func statsIndex(s string) int {
	for i, st := range statsStates {
		if string(st) == s {
			return i
		}
	}
	return -1
}

// firstFinished is the position of the first finished state in statsStates.
const firstFinished = 4

type statsKey struct{ queue, kind string }

// statsLine is one queue and kind in a sample.
type statsLine struct {
	counts          statsCounts
	pendingFailures int64
	oldest          *time.Time
	cps, fps, dps   float64
}

func (l *statsLine) empty() bool {
	// pendingFailures too: the jobs of a line that all finished inside the commit margin
	// leave it no counts, and their failures must reach the next sample as the previous
	// ones, or it counts them again (FailedPerSec twice).
	return l.counts == statsCounts{} && l.cps == 0 && l.fps == 0 && l.dps == 0 && l.pendingFailures == 0
}

// sampleStatsIfDue samples the stats when this worker's hint says one may be due; the
// database decides (venturi_stats_state), so that any number of maintainers sample once per
// interval between them.
func (m *maintainer) sampleStatsIfDue(ctx context.Context) {
	if time.Now().Before(m.statsNext) {
		return
	}
	wait, err := m.sampleStats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("venturi: stats sample failed", "err", err, "transient", IsTransient(err))
		}
		wait = m.cfg.StatsInterval
	}
	m.statsNext = time.Now().Add(wait)
}

// sampleStats takes one sample under the stats lock if one is due, in one REPEATABLE READ
// transaction. It returns how long until the next may be due. It holds no lock that rescue
// or promotion takes: a sample of a large table takes seconds, and a sample cut off by the
// network holds its locks until the server ends its transaction.
func (m *maintainer) sampleStats(ctx context.Context) (wait time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*statsStatementTimeout)
	defer cancel()
	wait = m.cfg.StatsInterval
	// One snapshot for the whole sample: the pending and the finished counts are separate
	// statements, and under READ COMMITTED a job that finished between them was counted
	// in both (its failures twice in FailedPerSec), or in neither.
	err = inTx(ctx, m.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, idleTxBound(m.cfg.Lease), func(tx pgx.Tx) error {
		locked, err := m.q.TryStatsLock(ctx, tx)
		if err != nil || !locked {
			return err // another worker samples
		}
		st, err := m.q.StatsBegin(ctx, tx)
		if err != nil {
			return err
		}
		if st.SampledAt != nil {
			if due := st.SampledAt.Add(time.Duration(st.IntervalUs) * time.Microsecond); st.Now.Before(due) {
				wait = due.Sub(st.Now)
				return nil
			}
		}
		if err := m.q.SetLocalStatementTimeout(ctx, tx, statementTimeoutMs(statsStatementTimeout)); err != nil {
			return err
		}
		s, err := m.takeSample(ctx, tx, st)
		if err != nil {
			return err
		}
		wait = s.interval
		return nil
	})
	return wait, err
}

// sample is what one sample found and decided.
type sample struct {
	interval time.Duration // until the next sample
}

// takeSample counts, computes and writes one sample in tx.
func (m *maintainer) takeSample(ctx context.Context, tx pgx.Tx, st *dbsqlc.StatsBeginRow) (*sample, error) {
	start := time.Now()
	pending, err := m.q.StatsPending(ctx, tx)
	if err != nil {
		return nil, err
	}
	// The finished jobs are counted up to through (the statements compute it alike, from
	// the same now()): the sample's time less the commit margin, never moving back.
	through := st.Now.Add(-statsCommitMargin)
	if st.CountedThrough != nil && through.Before(*st.CountedThrough) {
		through = *st.CountedThrough // the clock went back: count nothing twice
	}
	margin := delayOf(statsCommitMargin)
	// The jobs that finished since the previous sample (on the first, only the recent
	// ones): those up to through are counted now, the recent ones (inside the margin)
	// count as unfinished for FailedPerSec.
	window, err := m.q.StatsFinished(ctx, tx, dbsqlc.StatsFinishedParams{MarginUs: margin})
	if err != nil {
		return nil, err
	}
	cost := time.Since(start)
	recountCost := time.Duration(-1)
	var recount []*dbsqlc.StatsFinishedRow
	if st.RecountedAt == nil || !st.Now.Before(st.RecountedAt.Add(time.Duration(st.RecountEveryUs)*time.Microsecond)) {
		rs := time.Now()
		if recount, err = m.q.StatsFinished(ctx, tx, dbsqlc.StatsFinishedParams{MarginUs: margin, Recount: true}); err != nil {
			return nil, err
		}
		recountCost = time.Since(rs)
	}
	old, err := m.q.StatsKinds(ctx, tx)
	if err != nil {
		return nil, err
	}
	secs := 0.0
	if st.CountedThrough != nil {
		secs = through.Sub(*st.CountedThrough).Seconds()
	}
	lines := combineSample(old, pending, window, recount, recountCost >= 0, secs)
	if err := m.writeSample(ctx, tx, st.Now, lines); err != nil {
		return nil, err
	}
	writeStart := time.Now()
	if _, err := m.q.StatsPruneHistory(ctx, tx, statsPruneBatch); err != nil {
		return nil, err
	}
	cost += time.Since(writeStart)
	s := &sample{interval: stretched(m.cfg.StatsInterval, cost)}
	end := dbsqlc.StatsEndParams{IntervalUs: delayOf(s.interval), SampleUs: delayOf(cost), MarginUs: margin,
		Sampler: m.cfg.ID, RecountUs: -1}
	if recountCost >= 0 {
		end.RecountUs = delayOf(recountCost)
		end.RecountEveryUs = delayOf(stretched(statsRecountEvery, recountCost))
	}
	if err := m.q.StatsEnd(ctx, tx, end); err != nil {
		return nil, err
	}
	return s, nil
}

// stretched is the period after a task that cost cost, at least every: long enough that
// the task takes at most 1/statsCostFactor of it.
func stretched(every, cost time.Duration) time.Duration {
	return max(every, statsCostFactor*cost)
}

// combineSample computes the new sample's lines from the previous sample's (old), the
// unfinished jobs (pending), the jobs that finished in the last secs seconds (window) and,
// when recounted, all finished jobs (recount).
func combineSample(old []*dbsqlc.StatsKindsRow, pending []*dbsqlc.StatsPendingRow, window, recount []*dbsqlc.StatsFinishedRow,
	recounted bool, secs float64) map[statsKey]*statsLine {
	lines := map[statsKey]*statsLine{}
	line := func(k statsKey) *statsLine {
		l := lines[k]
		if l == nil {
			l = &statsLine{}
			lines[k] = l
		}
		return l
	}
	prevFailures := map[statsKey]int64{}
	for _, r := range old {
		k := statsKey{r.Queue, r.Kind}
		prevFailures[k] = r.PendingFailures
		if !recounted {
			l := line(k)
			l.counts[4], l.counts[5], l.counts[6] = r.Completed, r.Dead, r.Cancelled
		}
	}
	for _, r := range pending {
		if i := statsIndex(r.State); i >= 0 && i < firstFinished {
			l := line(statsKey{r.Queue, r.Kind})
			l.counts[i] += r.Jobs
			l.pendingFailures += r.Failures
			if statsStates[i] == StateAvailable && (l.oldest == nil || r.Oldest.Before(*l.oldest)) {
				oldest := r.Oldest
				l.oldest = &oldest
			}
		}
	}
	for _, r := range recount {
		if i := statsIndex(r.State); i >= firstFinished {
			line(statsKey{r.Queue, r.Kind}).counts[i] += r.Jobs
		}
	}
	type finished struct{ completed, dead, failures int64 }
	ended := map[statsKey]*finished{}
	for _, r := range window {
		i := statsIndex(r.State)
		if i < firstFinished {
			continue
		}
		k := statsKey{r.Queue, r.Kind}
		l := line(k)
		if r.Recent {
			// Finished inside the commit margin: counted by the next sample, and until then
			// its failures count as an unfinished job's (less the one that killed it).
			l.pendingFailures += r.Failures
			if statsStates[i] == StateDead {
				l.pendingFailures -= r.Jobs
			}
			continue
		}
		if !recounted {
			l.counts[i] += r.Jobs
		}
		e := ended[k]
		if e == nil {
			e = &finished{}
			ended[k] = e
		}
		e.failures += r.Failures
		switch statsStates[i] {
		case StateCompleted:
			e.completed += r.Jobs
		case StateDead:
			e.dead += r.Jobs
		}
	}
	for k, l := range lines {
		if secs > 0 {
			e := ended[k]
			if e == nil {
				e = &finished{}
			}
			l.cps, l.dps = float64(e.completed)/secs, float64(e.dead)/secs
			// Failed runs that the job survived: the growth of the unfinished jobs'
			// failures, plus the failures that left with the jobs that finished, less the
			// failure that sent each dead job to dead (DeadPerSec counts it).
			if f := l.pendingFailures - prevFailures[k] + e.failures - e.dead; f > 0 {
				l.fps = float64(f) / secs
			}
		}
		if l.empty() {
			delete(lines, k)
		}
	}
	return lines
}

// writeSample replaces the latest sample with lines and adds its history lines.
func (m *maintainer) writeSample(ctx context.Context, tx pgx.Tx, at time.Time, lines map[statsKey]*statsLine) error {
	keys := make([]statsKey, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b statsKey) int {
		if a.queue != b.queue {
			return compareStrings(a.queue, b.queue)
		}
		return compareStrings(a.kind, b.kind)
	})
	var kp dbsqlc.StatsWriteKindsParams
	var hp dbsqlc.StatsWriteHistoryParams // at: the transaction's now(), as the statement writes it
	for _, k := range keys {
		l := lines[k]
		kp.Queues = append(kp.Queues, k.queue)
		kp.Kinds = append(kp.Kinds, k.kind)
		kp.Available = append(kp.Available, l.counts[0])
		kp.Running = append(kp.Running, l.counts[1])
		kp.Scheduled = append(kp.Scheduled, l.counts[2])
		kp.Waiting = append(kp.Waiting, l.counts[3])
		kp.Completed = append(kp.Completed, l.counts[4])
		kp.Dead = append(kp.Dead, l.counts[5])
		kp.Cancelled = append(kp.Cancelled, l.counts[6])
		kp.PendingFailures = append(kp.PendingFailures, l.pendingFailures)
		kp.OldestUs = append(kp.OldestUs, unixMicros(l.oldest))
		kp.CompletedPerSec = append(kp.CompletedPerSec, l.cps)
		kp.FailedPerSec = append(kp.FailedPerSec, l.fps)
		kp.DeadPerSec = append(kp.DeadPerSec, l.dps)
		n := len(hp.Queues) - 1
		if n < 0 || hp.Queues[n] != k.queue {
			hp.Queues = append(hp.Queues, k.queue)
			hp.Available = append(hp.Available, 0)
			hp.Running = append(hp.Running, 0)
			hp.Scheduled = append(hp.Scheduled, 0)
			hp.Waiting = append(hp.Waiting, 0)
			hp.OldestUs = append(hp.OldestUs, 0)
			hp.LagUs = append(hp.LagUs, 0)
			hp.CompletedPerSec = append(hp.CompletedPerSec, 0)
			hp.FailedPerSec = append(hp.FailedPerSec, 0)
			hp.DeadPerSec = append(hp.DeadPerSec, 0)
			n++
		}
		hp.Available[n] += l.counts[0]
		hp.Running[n] += l.counts[1]
		hp.Scheduled[n] += l.counts[2]
		hp.Waiting[n] += l.counts[3]
		if l.oldest != nil && (hp.OldestUs[n] == 0 || unixMicros(l.oldest) < hp.OldestUs[n]) {
			hp.OldestUs[n] = unixMicros(l.oldest)
			hp.LagUs[n] = delayOf(max(at.Sub(*l.oldest), 0))
		}
		hp.CompletedPerSec[n] += l.cps
		hp.FailedPerSec[n] += l.fps
		hp.DeadPerSec[n] += l.dps
	}
	if err := m.q.StatsWriteKinds(ctx, tx, kp); err != nil {
		return err
	}
	if len(hp.Queues) == 0 {
		return nil
	}
	return m.q.StatsWriteHistory(ctx, tx, hp)
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// unixMicros is t in microseconds since the Unix epoch, 0 for none.
func unixMicros(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixMicro()
}

// statementTimeoutMs is a statement_timeout setting for d.
func statementTimeoutMs(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// Stats reads the latest stats sample (one row per queue and kind, in one statement):
// queues by name, each with its kinds by name. A queue that has settings but no jobs is
// listed with zero counts. The queues' Paused and Concurrency are their current settings.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	// In the ops reads' transaction settings (readTx): without JIT above all. The stats tables are
	// tiny, but until autovacuum first analyzes them (a new schema, a restored one) the
	// planner's default estimates price this join past jit_above_cost, and compiling it
	// took 30 ms of a 0.3 ms read (bench scenario 14).
	var rows []*dbsqlc.StatsReadRow
	err := q.readTx(ctx, func(tx pgx.Tx) (err error) {
		rows, err = q.q.StatsRead(ctx, tx)
		return err
	})
	if err != nil {
		return Stats{}, err
	}
	var s Stats
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
