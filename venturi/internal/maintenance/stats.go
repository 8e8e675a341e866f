package maintenance

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/pgerr"
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
//   - a full recount of the finished jobs, every StatsRecountEvery or more, corrects what
//     drifted (jobs removed by workers of an older version, finishing transactions that
//     committed after a sample had passed their finished_at).
//
// A sample that takes long stretches the interval to statsCostFactor times its cost (and
// a recount its period the same way), so sampling stays under about 1/statsCostFactor of
// one database backend however large the table grows.
const (
	// StatsRecountEvery is the shortest period between two full recounts of the finished
	// jobs.
	StatsRecountEvery = 10 * time.Minute
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

// StatsStates are the states a stats row counts, in the order of StatsCounts (the root
// package's statsStates, as strings: the same order).
var StatsStates = [...]string{"available", "running", "scheduled", "waiting", "completed", "dead", "cancelled"}

// StatsCounts holds job counts in the order of StatsStates.
type StatsCounts [len(StatsStates)]int64

// statsIndex is the position of state s in StatsStates (-1 for none).
func statsIndex(s string) int {
	for i, st := range StatsStates {
		if st == s {
			return i
		}
	}
	return -1
}

// The positions in StatsStates that the sampler treats apart.
const (
	// availableIndex is the position of available in StatsStates.
	availableIndex = 0
	// firstFinished is the position of the first finished state in StatsStates.
	firstFinished = 4
	// completedIndex is the position of completed in StatsStates.
	completedIndex = 4
	// deadIndex is the position of dead in StatsStates.
	deadIndex = 5
)

// StatsKey names one line of a sample: a queue and a kind.
type StatsKey struct {
	// Queue is the line's queue.
	Queue string
	// Kind is the line's kind.
	Kind string
}

// StatsLine is one queue and kind in a sample.
type StatsLine struct {
	// Counts are the line's jobs by state.
	Counts StatsCounts
	// PendingFailures is the sum of the failures of the line's unfinished jobs (those
	// that finished inside the commit margin included).
	PendingFailures int64
	// Oldest is the earliest due time of the line's available jobs (nil: none).
	Oldest *time.Time
	// CompletedPerSec, FailedPerSec and DeadPerSec are the line's rates since the
	// previous sample.
	CompletedPerSec, FailedPerSec, DeadPerSec float64
}

// empty reports whether the line holds nothing worth writing.
func (l *StatsLine) empty() bool {
	// PendingFailures too: the jobs of a line that all finished inside the commit margin
	// leave it no counts, and their failures must reach the next sample as the previous
	// ones, or it counts them again (FailedPerSec twice).
	return l.Counts == StatsCounts{} && l.CompletedPerSec == 0 && l.FailedPerSec == 0 && l.DeadPerSec == 0 &&
		l.PendingFailures == 0
}

// SamplerConfig configures a Sampler.
type SamplerConfig struct {
	// Interval is the shortest period between two samples (Config.StatsInterval); a
	// sample that takes long stretches it.
	Interval time.Duration
	// ID names the sampling worker in venturi_stats_state.
	ID string
	// InTx runs a sample's transaction: it must be REPEATABLE READ (one snapshot for the
	// whole sample) and idle-bounded.
	InTx TxFunc
	// Logger receives the failures of the samples.
	Logger *slog.Logger
}

// A Sampler samples the job table into the stats tables, at most once per interval
// between all the workers (the database decides, venturi_stats_state). A Sampler is used
// by one goroutine at a time.
type Sampler struct {
	cfg  SamplerConfig   // as given to the constructor
	q    *dbsqlc.Queries // the generated statements
	next time.Time       // when a sample may be due next; a hint, the database decides
}

// NewSampler returns a sampler that runs q's statements.
func NewSampler(cfg SamplerConfig, q *dbsqlc.Queries) *Sampler {
	return &Sampler{cfg: cfg, q: q}
}

// SampleIfDue samples the stats when this worker's hint says one may be due; the
// database decides (venturi_stats_state), so that any number of maintainers sample once per
// interval between them.
func (s *Sampler) SampleIfDue(ctx context.Context) {
	if time.Now().Before(s.next) {
		return
	}
	wait, err := s.RunOnce(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("venturi: stats sample failed", "err", err, "transient", pgerr.IsTransient(err))
		}
		wait = s.cfg.Interval
	}
	s.next = time.Now().Add(wait)
}

// RunOnce takes one sample under the stats lock if one is due, in one REPEATABLE READ
// transaction. It returns how long until the next may be due. It holds no lock that rescue
// or promotion takes: a sample of a large table takes seconds, and a sample cut off by the
// network holds its locks until the server ends its transaction.
func (s *Sampler) RunOnce(ctx context.Context) (wait time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*statsStatementTimeout)
	defer cancel()
	wait = s.cfg.Interval
	// One snapshot for the whole sample: the pending and the finished counts are separate
	// statements, and under READ COMMITTED a job that finished between them was counted
	// in both (its failures twice in FailedPerSec), or in neither.
	err = s.cfg.InTx(ctx, func(tx pgx.Tx) error {
		locked, err := s.q.TryStatsLock(ctx, tx)
		if err != nil || !locked {
			return err // another worker samples
		}
		st, err := s.q.StatsBegin(ctx, tx)
		if err != nil {
			return err
		}
		if st.SampledAt != nil {
			if due := st.SampledAt.Add(time.Duration(st.IntervalUs) * time.Microsecond); st.Now.Before(due) {
				wait = due.Sub(st.Now)
				return nil
			}
		}
		if err := s.q.SetLocalStatsSettings(ctx, tx, statementTimeoutMs(statsStatementTimeout)); err != nil {
			return err
		}
		smp, err := s.takeSample(ctx, tx, st)
		if err != nil {
			return err
		}
		wait = smp.interval
		return nil
	})
	return wait, err
}

// sample is what one sample found and decided.
type sample struct {
	interval time.Duration // until the next sample
}

// takeSample counts, computes and writes one sample in tx.
func (s *Sampler) takeSample(ctx context.Context, tx pgx.Tx, st *dbsqlc.StatsBeginRow) (*sample, error) {
	start := time.Now()
	pending, err := s.q.StatsPending(ctx, tx)
	if err != nil {
		return nil, err
	}
	// The finished jobs are counted up to through (the statements compute it alike, from
	// the same now()): the sample's time less the commit margin, never moving back.
	through := st.Now.Add(-statsCommitMargin)
	if st.CountedThrough != nil && through.Before(*st.CountedThrough) {
		through = *st.CountedThrough // the clock went back: count nothing twice
	}
	margin := micros(statsCommitMargin)
	// The jobs that finished since the previous sample (on the first, only the recent
	// ones): those up to through are counted now, the recent ones (inside the margin)
	// count as unfinished for FailedPerSec.
	window, err := s.q.StatsFinished(ctx, tx, dbsqlc.StatsFinishedParams{MarginUs: margin})
	if err != nil {
		return nil, err
	}
	cost := time.Since(start)
	recountCost := time.Duration(-1)
	var recount []*dbsqlc.StatsFinishedRow
	if st.RecountedAt == nil || !st.Now.Before(st.RecountedAt.Add(time.Duration(st.RecountEveryUs)*time.Microsecond)) {
		rs := time.Now()
		if recount, err = s.q.StatsFinished(ctx, tx, dbsqlc.StatsFinishedParams{MarginUs: margin, Recount: true}); err != nil {
			return nil, err
		}
		recountCost = time.Since(rs)
	}
	old, err := s.q.StatsKinds(ctx, tx)
	if err != nil {
		return nil, err
	}
	secs := 0.0
	if st.CountedThrough != nil {
		secs = through.Sub(*st.CountedThrough).Seconds()
	}
	lines := CombineSample(old, pending, window, recount, recountCost >= 0, secs)
	if err := s.writeSample(ctx, tx, st.Now, lines); err != nil {
		return nil, err
	}
	writeStart := time.Now()
	if _, err := s.q.StatsPruneHistory(ctx, tx, statsPruneBatch); err != nil {
		return nil, err
	}
	cost += time.Since(writeStart)
	smp := &sample{interval: Stretched(s.cfg.Interval, cost)}
	end := dbsqlc.StatsEndParams{IntervalUs: micros(smp.interval), SampleUs: micros(cost), MarginUs: margin,
		Sampler: s.cfg.ID, RecountUs: -1}
	if recountCost >= 0 {
		end.RecountUs = micros(recountCost)
		end.RecountEveryUs = micros(Stretched(StatsRecountEvery, recountCost))
	}
	if err := s.q.StatsEnd(ctx, tx, end); err != nil {
		return nil, err
	}
	return smp, nil
}

// Stretched is the period after a task that cost cost, at least every: long enough that
// the task takes at most 1/statsCostFactor of it.
func Stretched(every, cost time.Duration) time.Duration {
	return max(every, statsCostFactor*cost)
}

// CombineSample computes the new sample's lines from the previous sample's (old), the
// unfinished jobs (pending), the jobs that finished in the last secs seconds (window) and,
// when recounted, all finished jobs (recount).
func CombineSample(old []*dbsqlc.StatsKindsRow, pending []*dbsqlc.StatsPendingRow, window, recount []*dbsqlc.StatsFinishedRow,
	recounted bool, secs float64) map[StatsKey]*StatsLine {
	lines := map[StatsKey]*StatsLine{}
	line := func(k StatsKey) *StatsLine {
		l := lines[k]
		if l == nil {
			l = &StatsLine{}
			lines[k] = l
		}
		return l
	}
	prevFailures := map[StatsKey]int64{}
	for _, r := range old {
		k := StatsKey{r.Queue, r.Kind}
		prevFailures[k] = r.PendingFailures
		if !recounted {
			l := line(k)
			l.Counts[4], l.Counts[5], l.Counts[6] = r.Completed, r.Dead, r.Cancelled
		}
	}
	for _, r := range pending {
		if i := statsIndex(r.State); i >= 0 && i < firstFinished {
			l := line(StatsKey{r.Queue, r.Kind})
			l.Counts[i] += r.Jobs
			l.PendingFailures += r.Failures
			if i == availableIndex && (l.Oldest == nil || r.Oldest.Before(*l.Oldest)) {
				oldest := r.Oldest
				l.Oldest = &oldest
			}
		}
	}
	for _, r := range recount {
		if i := statsIndex(r.State); i >= firstFinished {
			line(StatsKey{r.Queue, r.Kind}).Counts[i] += r.Jobs
		}
	}
	type finished struct{ completed, dead, failures int64 }
	ended := map[StatsKey]*finished{}
	for _, r := range window {
		i := statsIndex(r.State)
		if i < firstFinished {
			continue
		}
		k := StatsKey{r.Queue, r.Kind}
		l := line(k)
		if r.Recent {
			// Finished inside the commit margin: counted by the next sample, and until then
			// its failures count as an unfinished job's (less the one that killed it).
			l.PendingFailures += r.Failures
			if i == deadIndex {
				l.PendingFailures -= r.Jobs
			}
			continue
		}
		if !recounted {
			l.Counts[i] += r.Jobs
		}
		e := ended[k]
		if e == nil {
			e = &finished{}
			ended[k] = e
		}
		e.failures += r.Failures
		switch i {
		case completedIndex:
			e.completed += r.Jobs
		case deadIndex:
			e.dead += r.Jobs
		}
	}
	for k, l := range lines {
		if secs > 0 {
			e := ended[k]
			if e == nil {
				e = &finished{}
			}
			l.CompletedPerSec, l.DeadPerSec = float64(e.completed)/secs, float64(e.dead)/secs
			// Failed runs that the job survived: the growth of the unfinished jobs'
			// failures, plus the failures that left with the jobs that finished, less the
			// failure that sent each dead job to dead (DeadPerSec counts it).
			if f := l.PendingFailures - prevFailures[k] + e.failures - e.dead; f > 0 {
				l.FailedPerSec = float64(f) / secs
			}
		}
		if l.empty() {
			delete(lines, k)
		}
	}
	return lines
}

// writeSample replaces the latest sample with lines and adds its history lines.
func (s *Sampler) writeSample(ctx context.Context, tx pgx.Tx, at time.Time, lines map[StatsKey]*StatsLine) error {
	keys := make([]StatsKey, 0, len(lines))
	for k := range lines {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b StatsKey) int {
		if a.Queue != b.Queue {
			return compareStrings(a.Queue, b.Queue)
		}
		return compareStrings(a.Kind, b.Kind)
	})
	var kp dbsqlc.StatsWriteKindsParams
	var hp dbsqlc.StatsWriteHistoryParams // at: the transaction's now(), as the statement writes it
	for _, k := range keys {
		l := lines[k]
		kp.Queues = append(kp.Queues, k.Queue)
		kp.Kinds = append(kp.Kinds, k.Kind)
		kp.Available = append(kp.Available, l.Counts[0])
		kp.Running = append(kp.Running, l.Counts[1])
		kp.Scheduled = append(kp.Scheduled, l.Counts[2])
		kp.Waiting = append(kp.Waiting, l.Counts[3])
		kp.Completed = append(kp.Completed, l.Counts[4])
		kp.Dead = append(kp.Dead, l.Counts[5])
		kp.Cancelled = append(kp.Cancelled, l.Counts[6])
		kp.PendingFailures = append(kp.PendingFailures, l.PendingFailures)
		kp.OldestUs = append(kp.OldestUs, unixMicros(l.Oldest))
		kp.CompletedPerSec = append(kp.CompletedPerSec, l.CompletedPerSec)
		kp.FailedPerSec = append(kp.FailedPerSec, l.FailedPerSec)
		kp.DeadPerSec = append(kp.DeadPerSec, l.DeadPerSec)
		n := len(hp.Queues) - 1
		if n < 0 || hp.Queues[n] != k.Queue {
			hp.Queues = append(hp.Queues, k.Queue)
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
		hp.Available[n] += l.Counts[0]
		hp.Running[n] += l.Counts[1]
		hp.Scheduled[n] += l.Counts[2]
		hp.Waiting[n] += l.Counts[3]
		if l.Oldest != nil && (hp.OldestUs[n] == 0 || unixMicros(l.Oldest) < hp.OldestUs[n]) {
			hp.OldestUs[n] = unixMicros(l.Oldest)
			hp.LagUs[n] = micros(max(at.Sub(*l.Oldest), 0))
		}
		hp.CompletedPerSec[n] += l.CompletedPerSec
		hp.FailedPerSec[n] += l.FailedPerSec
		hp.DeadPerSec[n] += l.DeadPerSec
	}
	if err := s.q.StatsWriteKinds(ctx, tx, kp); err != nil {
		return err
	}
	if len(hp.Queues) == 0 {
		return nil
	}
	return s.q.StatsWriteHistory(ctx, tx, hp)
}

// compareStrings orders a and b as strings.Compare does.
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
