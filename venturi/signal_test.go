package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// approval waits for the signal "approve" (Timeout, default an hour), then completes with
// who approved, or "timed out". Again makes it wait again when no signal came.
type approval struct {
	N       int
	Timeout time.Duration
	Again   bool
}

type approvedBy struct {
	By string `json:"by"`
}

func (approval) Kind() string { return "approval" }
func (a approval) Handle(ctx context.Context, run *venturi.Run[int], _ struct{}) (venturi.Outcome, error) {
	names, waited := run.Waited()
	if !waited {
		*run.CarryMut() = 7 // kept through the wait
		return venturi.WaitForSignal(cmp(a.Timeout, time.Hour), "approve"), nil
	}
	sigs, err := run.Signals(ctx, names...)
	if err != nil {
		return venturi.Outcome{}, err
	}
	if len(sigs) == 0 {
		if a.Again {
			return venturi.WaitForSignal(time.Hour, "approve"), nil
		}
		return venturi.CompletedWith("timed out"), nil
	}
	who, err := venturi.DecodeSignal[approvedBy](sigs[0])
	if err != nil {
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	return venturi.CompletedWith(fmt.Sprintf("approved by %s (%d signals, carry %d)", who.By, len(sigs), run.Carry())), nil
}

func cmp(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// TestWaitForSignal: a job waits (state waiting, not a failure, carry kept) until its
// signal arrives from another pool; the next run reads the typed payload. A repeated
// delivery ID is delivered once; a signal to an ended job is refused.
func TestWaitForSignal(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	startWorkerFor[approval](t, pool, struct{}{}, fastConfig())
	r := enqueue(t, q, approval{N: 1})
	j := waitState(t, q, r, venturi.StateWaiting)
	if e := lastEntry(j); e.Event != venturi.EventWaiting || len(e.Wait) != 1 || e.Wait[0] != "approve" || j.Failures != 0 {
		t.Fatalf("waiting entry %+v, failures %d", e, j.Failures)
	}
	sender := venturi.NewQueue(newPoolLike(t, pool), venturi.QueueConfig{})
	res, err := sender.Signal(ctx, r.ID, "approve", approvedBy{By: "ann"}, "mail-1")
	if err != nil || !res.Stored || !res.Woke {
		t.Fatalf("Signal = %+v, %v", res, err)
	}
	if res, err := sender.Signal(ctx, r.ID, "approve", approvedBy{By: "ann"}, "mail-1"); err != nil && !errors.Is(err, venturi.ErrJobFinished) || res.Stored {
		t.Fatalf("repeated Signal = %+v, %v", res, err)
	}
	j = waitState(t, q, r, venturi.StateCompleted)
	if n := lastEntry(j).Note; n != "approved by ann (1 signals, carry 7)" {
		t.Fatalf("note %q", n)
	}
	if _, err := sender.Signal(ctx, r.ID, "approve", nil, "mail-2"); !errors.Is(err, venturi.ErrJobFinished) {
		t.Fatalf("Signal to a completed job: %v", err)
	}
	if _, err := sender.Signal(ctx, ulid.Make(), "approve", nil, ""); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("Signal to an unknown job: %v", err)
	}
	if _, err := sender.Signal(ctx, r.ID, "", nil, ""); !errors.Is(err, venturi.ErrInvalidSignal) {
		t.Fatalf("Signal without a name: %v", err)
	}
}

// TestSignalBeforeTheWait: a signal sent before the job waits is kept; the wait ends at
// once.
func TestSignalBeforeTheWait(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	r := enqueue(t, q, approval{N: 1})
	if res, err := q.Signal(ctx, r.ID, "approve", approvedBy{By: "bob"}, "early"); err != nil || !res.Stored || res.Woke {
		t.Fatalf("Signal = %+v, %v", res, err)
	}
	startWorkerFor[approval](t, pool, struct{}{}, fastConfig())
	j := waitState(t, q, r, venturi.StateCompleted)
	if got := eventsOf(j); got != "waiting,completed" || lastEntry(j).Note != "approved by bob (1 signals, carry 7)" {
		t.Fatalf("journal %s, note %q", got, lastEntry(j).Note)
	}
}

// TestWaitTimesOut: without a signal the job runs again after the timeout and learns it.
func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	startWorkerFor[approval](t, pool, struct{}{}, fastConfig())
	j := waitState(t, q, enqueue(t, q, approval{N: 1, Timeout: 50 * time.Millisecond}), venturi.StateCompleted)
	if lastEntry(j).Note != "timed out" || j.Failures != 0 {
		t.Fatalf("note %q, failures %d", lastEntry(j).Note, j.Failures)
	}
}

// TestSignalRacesTimeout: signals sent as short waits time out: no signal is lost or read
// twice. A run that timed out before its signal committed waits again, and the signal
// wakes that wait.
func TestSignalRacesTimeout(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	cfg := fastConfig()
	startWorkerFor[approval](t, pool, struct{}{}, cfg)
	var ids []ulid.ULID
	for i := range 20 {
		ids = append(ids, enqueue(t, q, approval{N: i, Timeout: 20 * time.Millisecond, Again: true}).ID)
	}
	for _, id := range ids {
		waitJob(t, q, id, "to wait or run", func(j *venturi.Job) bool { return j.RunCount >= 1 })
	}
	concurrently(len(ids), func(i int) {
		if _, err := q.Signal(ctx, ids[i], "approve", approvedBy{By: "race"}, "once"); err != nil {
			t.Errorf("Signal: %v", err)
		}
	})
	for _, id := range ids {
		deadline := time.Now().Add(within)
		j := jobByID(t, q, id)
		for j.State != venturi.StateCompleted && time.Now().Before(deadline) {
			<-time.After(5 * time.Millisecond)
			j = jobByID(t, q, id)
		}
		if j.State != venturi.StateCompleted {
			var sigs string
			_ = pool.QueryRow(ctx, `SELECT string_agg(seq || ':' || COALESCE(consumed_token::text, '-') || '@' || sent_at::text, ' ') FROM venturi_signal WHERE job_id = $1`, id[:]).Scan(&sigs)
			for _, e := range j.Journal {
				t.Logf("  %s run %d token %d %v..%v %q", e.Event, e.Run, e.Token, e.StartedAt.Format("05.000000"), e.At.Format("05.000000"), e.Note)
			}
			t.Fatalf("job %s is %s (run_at %v); signals %s", id, j.State, j.RunAt.Format("05.000000"), sigs)
		}
		if n := lastEntry(j).Note; n != "approved by race (1 signals, carry 7)" {
			t.Fatalf("job %s: %q", id, n)
		}
	}
	if n := countSignals(t, pool, "consumed_token IS NULL"); n != 0 {
		t.Fatalf("%d signals never consumed", n)
	}
}

// TestCancelWaitingJob: a waiting job is cancelled at once.
func TestCancelWaitingJob(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	startWorkerFor[approval](t, pool, struct{}{}, fastConfig())
	r := enqueue(t, q, approval{N: 1})
	waitState(t, q, r, venturi.StateWaiting)
	if res, err := q.Cancel(context.Background(), r.ID, "nobody approved"); err != nil || res != venturi.CancelEnded {
		t.Fatalf("Cancel = %v, %v", res, err)
	}
	waitState(t, q, r, venturi.StateCancelled)
}

// countSignals counts venturi_signal rows matching the SQL condition where.
func countSignals(t *testing.T, pool *pgxpool.Pool, where string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM venturi_signal WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSignalsGoWithTheirJob: deleting a job (an operator's bulk delete) deletes its
// signals. (Retention drops finished jobs by partition; the retention duty's orphan sweep
// deletes what they leave: internal/maintenance's TestOrphanSweeper.)
func TestSignalsGoWithTheirJob(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	r := enqueue(t, q, approval{N: 1}, venturi.After(time.Hour))
	other := enqueue(t, q, approval{N: 2}, venturi.After(time.Hour))
	for _, id := range []ulid.ULID{r.ID, other.ID} {
		if _, err := q.Signal(ctx, id, "approve", nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := q.DeleteJobs(ctx, venturi.JobFilter{IDs: []ulid.ULID{r.ID}}, venturi.BulkOptions{}); err != nil || res.Changed != 1 {
		t.Fatalf("DeleteJobs: %+v, %v", res, err)
	}
	if n := countSignals(t, pool, "true"); n != 1 {
		t.Fatalf("%d signals left, want the other job's 1", n)
	}
}
