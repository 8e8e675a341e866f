package venturi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// errExplainRollback ends Explain's transaction: it is always rolled back.
var errExplainRollback = errors.New("venturi: explain rolls back")

// Explain shows what an enqueue of task with opts would do now, and changes nothing:
// the enqueue runs in a transaction that is rolled back, without enqueue middleware.
//
// It is the real enqueue path (the dedup lock, the candidate lookup, the task's merge, the
// insert), so Action, Job and Due are what an enqueue would produce at this moment; it
// takes the same locks as an enqueue for as long as it runs (milliseconds), sends no
// notification and publishes no in-process event. A new job's ID is drawn by the explain
// (a real enqueue draws another, and the retry jitter, which derives from the ID, differs).
// Retries uses the task's [BackoffPolicy] over [DefaultBackoff], [DefaultJitterFraction]
// and the backstop [DefaultMaxFailures] (or the one the pending job's last claim recorded):
// the workers' Config, which the Queue cannot see, may differ.
func (q *Queue) Explain(ctx context.Context, task Task, opts ...EnqueueOption) (*Explanation, error) {
	p, err := q.prepare(task, opts)
	if err != nil {
		return nil, err
	}
	ex := &Explanation{Kind: p.kind, Queue: p.queue, Priority: p.priority, DedupKey: DedupKey(p.key)}
	// The enqueue sends no NOTIFY and touches no debouncer of q's.
	quiet := &Queue{pool: q.pool, q: q.q, channel: q.channel, poll: true, streamEvents: q.streamEvents,
		notify: &notifyLimiter{last: map[string]time.Time{}}}
	err = pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if p.key != "" {
			id, err := q.q.PendingDedupJob(ctx, tx, dbsqlc.PendingDedupJobParams{Kind: p.kind, DedupKey: p.key})
			switch {
			case err == nil:
				if ex.Pending, err = q.jobIn(ctx, tx, ulidOf(id)); err != nil {
					return err
				}
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		var res Result
		if p.key == "" {
			res, err = quiet.insert(ctx, tx, p, ActionInserted)
		} else {
			res, err = quiet.enqueueTx(ctx, tx, p)
		}
		if err != nil {
			return err
		}
		ex.Action = res.Action
		if ex.Job, err = q.jobIn(ctx, tx, res.ID); err != nil {
			return err
		}
		ex.Due = ex.Job.RunAt
		facts, err := q.explainFacts(ctx, tx, ex.Job)
		if err != nil {
			return err
		}
		ex.Notes = enqueueNotes(ex, facts)
		ex.Notes = append(ex.Notes, flowNotes(ex.Job, facts)...)
		ex.Retries = retrySchedule(backoffOf(task), DefaultJitterFraction, ex.Job.ID, ex.Job.Failures+1, backstopOf(facts))
		return errExplainRollback
	})
	if !errors.Is(err, errExplainRollback) {
		return nil, err
	}
	return ex, nil
}

// backoffOf is the backoff of a task's jobs under the default worker configuration.
func backoffOf(task Task) Backoff {
	if bp, ok := task.(BackoffPolicy); ok {
		return bp.Backoff().merged(DefaultBackoff)
	}
	return DefaultBackoff
}

// backstopOf is the backstop a job's last claim recorded, or the default.
func backstopOf(f *dbsqlc.ExplainFactsRow) int {
	if f.MaxFailures != 0 {
		return int(f.MaxFailures) // negative: the claiming worker had none
	}
	return DefaultMaxFailures
}

// explainFacts reads what holds job j back now.
func (q *Queue) explainFacts(ctx context.Context, db dbsqlc.DBTX, j *Job) (*dbsqlc.ExplainFactsRow, error) {
	slot := ""
	if j.Slot != nil {
		slot = j.Slot.Key
	}
	return q.q.ExplainFacts(ctx, db, dbsqlc.ExplainFactsParams{ID: uuidOf(j.ID), Queue: j.Queue, Kind: j.Kind,
		SlotKey: slot, Part: j.Partition})
}

// enqueueNotes says what an explained enqueue did.
func enqueueNotes(ex *Explanation, f *dbsqlc.ExplainFactsRow) []string {
	var notes []string
	switch ex.Action {
	case ActionInserted:
		notes = append(notes, fmt.Sprintf("a new job: its ID %s was drawn by this explain (a real enqueue draws another, and its retry jitter differs)", ex.Job.ID))
	case ActionIndependent:
		notes = append(notes, fmt.Sprintf("the merge decided Independent: a new job beside pending job %s (its ID %s drawn by this explain)", ex.Pending.ID, ex.Job.ID))
	default:
		notes = append(notes, fmt.Sprintf("merges into pending job %s (%s)", ex.Job.ID, ex.Action))
		if ex.Pending != nil && !ex.Pending.RunAt.Equal(ex.Job.RunAt) {
			notes = append(notes, fmt.Sprintf("the merge moves its due time from %s to %s", ex.Pending.RunAt.Format(time.RFC3339Nano), ex.Job.RunAt.Format(time.RFC3339Nano)))
		}
	}
	if d := ex.Due.Sub(f.Now); d > 0 {
		notes = append(notes, "due in "+roundDuration(d))
	}
	return notes
}

// flowNotes says what flow control applies to pending job j now.
func flowNotes(j *Job, f *dbsqlc.ExplainFactsRow) []string {
	var notes []string
	if f.QueuePaused {
		notes = append(notes, fmt.Sprintf("queue %s is paused: none of its jobs starts until it is resumed", j.Queue))
	}
	if f.QueueConcurrency > 0 {
		n := fmt.Sprintf("queue %s runs at most %d jobs at once (%d running)", j.Queue, f.QueueConcurrency, f.QueueRunning)
		if f.QueueRunning >= int64(f.QueueConcurrency) {
			n = fmt.Sprintf("queue %s full (%d of %d running)", j.Queue, f.QueueRunning, f.QueueConcurrency)
		}
		notes = append(notes, n)
	}
	if j.Slot != nil {
		n := fmt.Sprintf("slot %s: at most %d running at once (%d running)", j.Slot.Key, j.Slot.Limit, f.SlotRunning)
		if f.SlotRunning >= int64(j.Slot.Limit) {
			n = fmt.Sprintf("slot %s full (%d of %d running); policy %s", j.Slot.Key, f.SlotRunning, j.Slot.Limit, j.Slot.Policy)
		}
		notes = append(notes, n)
	}
	if f.KindConcurrency > 0 {
		n := fmt.Sprintf("kind %s runs at most %d at once (%d running)", j.Kind, f.KindConcurrency, f.KindRunning)
		if f.KindRunning >= int64(f.KindConcurrency) {
			n = fmt.Sprintf("kind %s full (%d of %d running)", j.Kind, f.KindRunning, f.KindConcurrency)
		}
		notes = append(notes, n)
	}
	if f.RateN > 0 {
		per := time.Duration(f.RatePeriodUs) * time.Microsecond
		scope := ""
		if f.RateByPart {
			scope = " per partition"
		}
		n := fmt.Sprintf("rate %d/%s%s: %d started in the current window", f.RateN, per, scope, f.RateUsed)
		if f.RateUsed >= int64(f.RateN) && f.RateFreesInUs >= 0 {
			n = fmt.Sprintf("rate %d/%s%s: next start in %s", f.RateN, per, scope, roundDuration(time.Duration(f.RateFreesInUs)*time.Microsecond))
		}
		notes = append(notes, n)
	}
	if c := j.Circuit; c != nil {
		name := c.Kind
		if c.Partition != "" {
			name += "/" + c.Partition
		}
		switch {
		case c.OpenUntil != nil && c.OpenUntil.After(f.Now):
			notes = append(notes, fmt.Sprintf("circuit %s open until %s (%d failures in a row)", name, c.OpenUntil.Format(time.RFC3339), c.Failures))
		case c.OpenUntil != nil:
			notes = append(notes, fmt.Sprintf("circuit %s half open: the next run is its probe", name))
		default:
			notes = append(notes, fmt.Sprintf("circuit %s closed (%d of %d failures in a row)", name, c.Failures, c.Threshold))
		}
	}
	if j.Gated && len(notes) == 0 {
		notes = append(notes, "gated (partition or kind limits): claimed by the gated claim, partitions in turn (virtual-time order)")
	}
	return notes
}

// ExplainJob says why job id is where it is and what happens next: a workflow's job names
// its workflow and node, and a blocked one says what its node waits for (its policy, and
// the nodes it needs that have not ended, with their jobs' states). Retries is the rest of
// its retry schedule with [DefaultBackoff] and [DefaultJitterFraction] (the job alone does
// not say its task's BackoffPolicy) until the backstop its last claim recorded; empty for a
// finished job. [ErrNotFound] for an unknown or pruned job.
func (q *Queue) ExplainJob(ctx context.Context, id ulid.ULID) (*JobExplanation, error) {
	var ex *JobExplanation
	err := q.readJob(ctx, id, func(tx pgx.Tx, j *Job) (err error) {
		ex, _, err = q.explainJob(ctx, tx, j)
		return err
	})
	return ex, err
}

// explainJob explains j, read in db's snapshot, and returns the workflow it is a member of
// (nil for none). A workflow's job is said to be its node's; a blocked one, what its node
// waits for.
func (q *Queue) explainJob(ctx context.Context, db dbsqlc.DBTX, j *Job) (*JobExplanation, *JobWorkflow, error) {
	f, err := q.explainFacts(ctx, db, j)
	if err != nil {
		return nil, nil, err
	}
	wf, wait, err := q.jobWorkflow(ctx, db, j.ID)
	if err != nil {
		return nil, nil, err
	}
	ex := &JobExplanation{Reasons: stateReasons(j, f)}
	if wf != nil {
		ex.Reasons = append(ex.Reasons, workflowReasons(j, wf, wait)...)
	}
	switch j.State {
	case StateScheduled, StateAvailable:
		ex.Reasons = append(ex.Reasons, flowNotes(j, f)...)
	}
	switch j.State {
	case StateCompleted, StateDead, StateCancelled:
	default:
		ex.Retries = retrySchedule(DefaultBackoff, DefaultJitterFraction, j.ID, j.Failures+1, backstopOf(f))
	}
	return ex, wf, nil
}

// stateReasons says in words where j is.
func stateReasons(j *Job, f *dbsqlc.ExplainFactsRow) []string {
	last := lastJournal(j)
	switch j.State {
	case StateScheduled:
		return []string{fmt.Sprintf("due in %s (at %s)", roundDuration(max(j.RunAt.Sub(f.Now), 0)), j.RunAt.Format(time.RFC3339))}
	case StateAvailable:
		return []string{fmt.Sprintf("available since %s (%s ago): waiting for a worker of queue %s that serves %s",
			j.RunAt.Format(time.RFC3339), roundDuration(max(f.Now.Sub(j.RunAt), 0)), j.Queue, j.Kind)}
	case StateRunning:
		r := fmt.Sprintf("running: run %d on worker %s", j.RunCount, j.Owner)
		if j.AttemptedAt != nil {
			r += fmt.Sprintf(" since %s (%s)", j.AttemptedAt.Format(time.RFC3339), roundDuration(max(f.Now.Sub(*j.AttemptedAt), 0)))
		}
		out := []string{r}
		if j.StopRequested {
			out = append(out, fmt.Sprintf("asked to stop (%s): %s; unless the run completes, the job ends cancelled", j.StopEvent, j.StopNote))
		}
		return out
	case StateWaiting:
		r := fmt.Sprintf("waiting for signal %s (timeout in %s)", strings.Join(f.WaitSignals, " or "), roundDuration(max(j.RunAt.Sub(f.Now), 0)))
		out := []string{r}
		if f.PendingSignals > 0 {
			out = append(out, fmt.Sprintf("%d signals sent and not yet read", f.PendingSignals))
		}
		return out
	case StateCompleted:
		return []string{fmt.Sprintf("completed at %s after %d runs", timeText(j.FinishedAt), j.RunCount)}
	case StateDead:
		return []string{fmt.Sprintf("dead at %s after %d failures: %s", timeText(j.FinishedAt), j.Failures, last.Note)}
	case StateCancelled:
		return []string{fmt.Sprintf("cancelled at %s (%s): %s", timeText(j.FinishedAt), last.Event, last.Note)}
	}
	return nil
}

// lastJournal is j's newest journal entry (zero when none).
func lastJournal(j *Job) JournalEntry {
	if len(j.Journal) == 0 {
		return JournalEntry{}
	}
	return j.Journal[len(j.Journal)-1]
}

func timeText(t *time.Time) string {
	if t == nil {
		return "?"
	}
	return t.Format(time.RFC3339)
}

// roundDuration writes d to a precision that reads well: 3m12s, 400ms, 1h5m0s.
func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
