package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// supState is the singleton tests' worker state: a script per run number and a record of
// the runs.
type supState struct {
	// script returns what run n does (nil: complete).
	script func(n int) error
	runs   chan int
}

func (s supState) do(n int) (venturi.Outcome, error) {
	s.runs <- n
	if s.script != nil {
		if err := s.script(n); err != nil {
			return venturi.Outcome{}, err
		}
	}
	return venturi.CompletedWith(fmt.Sprintf("run %d", n)), nil
}

type supOnFailure struct{}

func (supOnFailure) Kind() string { return "sup_on_failure" }
func (supOnFailure) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartOnFailure}
}
func (supOnFailure) Handle(_ context.Context, run *venturi.Run[struct{}], s supState) (venturi.Outcome, error) {
	return s.do(run.RunCount())
}

type supAlways struct{}

func (supAlways) Kind() string { return "sup_always" }
func (supAlways) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartAlways, Delay: 20 * time.Millisecond}
}
func (supAlways) Handle(_ context.Context, run *venturi.Run[struct{}], s supState) (venturi.Outcome, error) {
	return s.do(run.RunCount())
}

type supNever struct{}

func (supNever) Kind() string { return "sup_never" }
func (supNever) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartNever}
}
func (supNever) Handle(_ context.Context, run *venturi.Run[struct{}], s supState) (venturi.Outcome, error) {
	return s.do(run.RunCount())
}

// TestSingletonIsCreatedOnce: three workers that start together create one job of the
// singleton kind; EnsureSingleton finds it; producers cannot enqueue the kind.
func TestSingletonIsCreatedOnce(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	st := supState{runs: make(chan int, 16), script: func(int) error { return errors.New("keep failing") }}
	cfg := fastConfig()
	cfg.Backoff = venturi.Backoff{Base: time.Hour, Cap: time.Hour} // three runs (the curve starts 0, 0), then an hour
	workers := make([]*venturi.Worker[supState], 3)
	for i := range workers {
		c := cfg
		c.ID = fmt.Sprintf("w%d", i)
		workers[i] = newWorker(t, pool, st, c)
		venturi.MustRegister[supOnFailure](workers[i])
	}
	errs := make([]error, 3)
	concurrently(3, func(i int) { errs[i] = workers[i].Start(context.Background()) })
	for i, w := range workers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(func() { stopWorker(t, w) })
	}
	if n := countJobs(t, pool, "kind = 'sup_on_failure'"); n != 1 {
		t.Fatalf("%d singleton jobs, want 1", n)
	}
	id := idWhere(t, pool, "kind = 'sup_on_failure'")
	res, err := q.EnsureSingleton(context.Background(), supOnFailure{})
	if err != nil || res.ID != id || res.Action != venturi.ActionKept {
		t.Fatalf("EnsureSingleton = %+v, %v; want kept %s", res, err, id)
	}
	if _, err := q.Enqueue(context.Background(), supOnFailure{}); !errors.Is(err, venturi.ErrSingleton) {
		t.Fatalf("Enqueue of a singleton: %v", err)
	}
	if _, err := q.EnsureSingleton(context.Background(), duePolicyTask{}); err == nil {
		t.Fatal("EnsureSingleton of a plain task type succeeded")
	}
	recv(t, st.runs, "the singleton's first run")
	j := waitJob(t, q, id, "failed into a long backoff", func(j *venturi.Job) bool { return j.Failures >= 1 && j.State == venturi.StateScheduled })
	if !j.Singleton || j.Slot == nil || j.Slot.Key != venturi.SingletonSlotPrefix+"sup_on_failure" || j.Slot.Limit != 1 {
		t.Fatalf("job view: singleton %v, slot %+v", j.Singleton, j.Slot)
	}
	list, err := q.Singletons(context.Background())
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].LastEntry == nil || list[0].LastEntry.Event != venturi.EventFailed {
		t.Fatalf("Singletons = %+v, %v", list, err)
	}
}

// TestSingletonRestartOnFailure: failures are retried with backoff; a completed run stops
// the service.
func TestSingletonRestartOnFailure(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	st := supState{runs: make(chan int, 16), script: func(n int) error {
		if n < 3 {
			return fmt.Errorf("failure %d", n)
		}
		return nil
	}}
	startWorkerFor[supOnFailure](t, pool, st, fastConfig())
	id := idWhere(t, pool, "kind = 'sup_on_failure'")
	j := waitFinished(t, q, id)
	if j.State != venturi.StateCompleted || eventsOf(j) != "failed,failed,completed" {
		t.Fatalf("state %s, journal %s", j.State, eventsOf(j))
	}
}

// TestSingletonRestartAlways: every run's end, completed, failed or permanently failed,
// schedules the next run after the fixed delay (not a backoff); the job never ends.
func TestSingletonRestartAlways(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := supState{runs: make(chan int, 64), script: func(n int) error {
		switch n {
		case 2:
			return errors.New("transient")
		case 3:
			return venturi.Permanent(errors.New("permanent"))
		}
		return nil
	}}
	cfg := fastConfig()
	cfg.Backoff = venturi.Backoff{Base: time.Hour, Cap: time.Hour} // a backoff would stall it
	startWorkerFor[supAlways](t, pool, st, cfg)
	id := idWhere(t, pool, "kind = 'sup_always'")
	j := waitJob(t, q, id, "five runs", func(j *venturi.Job) bool { return j.RunCount >= 5 && len(j.Journal) >= 4 })
	got := eventsOf(j)
	if !strings.HasPrefix(got, "completed,failed,failed,completed") {
		t.Fatalf("journal %s", got)
	}
	for _, e := range j.Journal[:4] {
		if e.ResumeIn != 20*time.Millisecond {
			t.Fatalf("entry %+v: want the restart delay 20ms", e)
		}
	}
	if j.State == venturi.StateCompleted || j.State == venturi.StateDead {
		t.Fatalf("an always-restarted singleton ended: %s", j.State)
	}
}

// TestSingletonRestartNever: a failed run ends the service dead without a retry; a
// completed one ends it completed; the next worker start creates it anew.
func TestSingletonRestartNever(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := supState{runs: make(chan int, 16), script: func(n int) error { return errors.New("broken") }}
	w := startWorkerFor[supNever](t, pool, st, fastConfig())
	id := idWhere(t, pool, "kind = 'sup_never'")
	j := waitFinished(t, q, id)
	if j.State != venturi.StateDead || eventsOf(j) != "dead" || !strings.Contains(lastEntry(j).Note, "restart policy never: broken") {
		t.Fatalf("state %s, journal %+v", j.State, j.Journal)
	}
	stopWorker(t, w)
	st.script = nil
	startWorkerFor[supNever](t, pool, st, fastConfig())
	eventually(t, within, "a second singleton job to complete", func() bool {
		return countJobs(t, pool, "kind = 'sup_never' AND state = 'completed'") == 1
	})
	if n := countJobs(t, pool, "kind = 'sup_never'"); n != 2 {
		t.Fatalf("%d jobs, want the dead one and the completed one", n)
	}
}

// service is a long-running singleton: it counts ticks in its carry, checkpoints each one
// and hands over (PauseIn(0)) at shutdown.
type service struct{}

type serviceCarry struct {
	Ticks int `json:"ticks"`
}

type serviceState struct {
	ticks   *atomic.Int64 // the highest tick reached by any run
	started chan string   // the worker ID of each run
	worker  string
}

func (service) Kind() string { return "service" }
func (service) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartAlways}
}
func (service) Handle(ctx context.Context, run *venturi.Run[serviceCarry], s serviceState) (venturi.Outcome, error) {
	s.started <- s.worker
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	c := run.CarryMut()
	for {
		select {
		case <-run.Shutdown():
			return venturi.PauseInWith(0, fmt.Sprintf("handover at tick %d", c.Ticks)), nil
		case <-ctx.Done():
			return venturi.Outcome{}, ctx.Err()
		case <-tick.C:
			c.Ticks++
			if err := run.Checkpoint(ctx); err != nil {
				return venturi.Outcome{}, err
			}
			s.ticks.Store(int64(c.Ticks))
		}
	}
}

// runsOf returns the job's run entries (not merges), ordered by start.
func runsOf(entries []venturi.JournalEntry) []venturi.JournalEntry {
	var runs []venturi.JournalEntry
	for _, e := range entries {
		if e.Event != venturi.EventMerged && !e.StartedAt.IsZero() {
			runs = append(runs, e)
		}
	}
	sort.Slice(runs, func(i, k int) bool { return runs[i].StartedAt.Before(runs[k].StartedAt) })
	return runs
}

// overlaps returns a description of the first two runs that overlap in time, or "".
func overlaps(runs []venturi.JournalEntry) string {
	for i := 1; i < len(runs); i++ {
		if runs[i].StartedAt.Before(runs[i-1].At) {
			return fmt.Sprintf("run %d (%s, %v..%v) and run %d (%s, from %v)", runs[i-1].Run, runs[i-1].Worker,
				runs[i-1].StartedAt, runs[i-1].At, runs[i].Run, runs[i].Worker, runs[i].StartedAt)
		}
	}
	return ""
}

// TestSingletonHandsOverOnGracefulStop: the running service's worker stops; its run sees
// Shutdown and pauses with its checkpoint, and the other worker takes over at once (well
// before the 30 s lease could have expired), continuing from the carry; the owner is
// visible throughout.
func TestSingletonHandsOverOnGracefulStop(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	var ticks atomic.Int64
	started := make(chan string, 16)
	cfg := fastConfig()
	cfg.Lease = 30 * time.Second
	cfg.ID = "first"
	a := startWorkerFor[service](t, pool, serviceState{ticks: &ticks, started: started, worker: "first"}, cfg)
	if got := recv(t, started, "the service to start"); got != "first" {
		t.Fatalf("started on %s", got)
	}
	id := idWhere(t, pool, "kind = 'service'")
	eventually(t, within, "ten ticks", func() bool { return ticks.Load() >= 10 })
	if j := jobByID(t, q, id); j.State != venturi.StateRunning || j.Owner != "first" {
		t.Fatalf("state %s owner %q", j.State, j.Owner)
	}
	cfg.ID = "second"
	startWorkerFor[service](t, pool, serviceState{ticks: &ticks, started: started, worker: "second"}, cfg)
	stopWorker(t, a)
	if got := recv(t, started, "the takeover"); got != "second" {
		t.Fatalf("taken over by %s", got)
	}
	j := waitJob(t, q, id, "owned by second", func(j *venturi.Job) bool { return j.Owner == "second" })
	handover := lastEntry(j)
	if handover.Event != venturi.EventPaused || handover.Worker != "first" || !strings.HasPrefix(handover.Note, "handover at tick") {
		t.Fatalf("handover entry %+v", handover)
	}
	var handedOver int
	if _, err := fmt.Sscanf(handover.Note, "handover at tick %d", &handedOver); err != nil || handedOver < 10 {
		t.Fatalf("handover note %q", handover.Note)
	}
	// The second run continues from the checkpoint: its carry never goes below it.
	j = waitJob(t, q, id, "a checkpoint past the handover", func(j *venturi.Job) bool {
		var c serviceCarry
		decodeCarry(t, j, &c)
		return c.Ticks > handedOver
	})
	if wait := j.AttemptedAt.Sub(handover.At); wait >= cfg.Lease {
		t.Fatalf("the takeover came %v after the handover: a lease wait", wait)
	}
	list, err := q.Singletons(context.Background())
	if err != nil || len(list) != 1 || list[0].Owner != "second" || list[0].LastEntry.Event != venturi.EventPaused {
		t.Fatalf("Singletons = %+v, %v", list, err)
	}
	if o := overlaps(runsOf(j.Journal)); o != "" {
		t.Fatal("overlapping runs: " + o)
	}
}

// TestSingletonTakeoverIsNotAFailure: a singleton run abandoned by a dead worker is taken
// over, not failed: the rescue leaves the job available with its failures unchanged, even
// at a backstop of one failure, and the next worker runs it. (Any other job would be dead.)
func TestSingletonTakeoverIsNotAFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	r, err := q.EnsureSingleton(ctx, supOnFailure{})
	if err != nil {
		t.Fatal(err)
	}
	abandon(t, pool, r.ID, 1) // its run's worker died, with a backstop of one failure
	cfg := fastConfig()
	cfg.Lease = time.Second
	cfg.MaxFailures = 1
	st := supState{runs: make(chan int, 4)}
	startWorkerFor[supOnFailure](t, pool, st, cfg)
	j := waitFinished(t, q, r.ID)
	if j.State != venturi.StateCompleted || eventsOf(j) != "abandoned,completed" || j.Failures != 0 {
		t.Fatalf("state %s after %s, %d failures; want completed after a takeover with none", j.State, eventsOf(j), j.Failures)
	}
}

// supCarry is a RestartAlways singleton with a carry.
type supCarry struct{}

type supCarryState struct{ N int }

func (supCarry) Kind() string { return "sup_carry" }
func (supCarry) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartAlways, Delay: time.Hour}
}
func (supCarry) Handle(_ context.Context, run *venturi.Run[supCarryState], s supState) (venturi.Outcome, error) {
	return s.do(run.RunCount())
}

// TestSingletonKeepsACheckpointItCannotDecode: a service whose stored carry this build
// cannot decode (its type changed) is not killed and its checkpoint is not lost: the run
// fails under the restart policy, noted, and the job keeps the carry for a fix or a
// rollback to resume from. (Any other job is dead, keeping the carry for an operator.)
func TestSingletonKeepsACheckpointItCannotDecode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	r, err := q.EnsureSingleton(ctx, supCarry{})
	if err != nil {
		t.Fatal(err)
	}
	const checkpoint = `{"N": "seven"}` // written by a build whose N was a string
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET carry = $2 WHERE id = $1`, uuidString(r.ID), checkpoint); err != nil {
		t.Fatal(err)
	}
	st := supState{runs: make(chan int, 4)}
	startWorkerFor[supCarry](t, pool, st, fastConfig())
	j := waitJob(t, q, r.ID, "the run to fail", func(j *venturi.Job) bool { return len(j.Journal) == 1 })
	e := j.Journal[0]
	if j.State != venturi.StateScheduled || e.Event != venturi.EventFailed ||
		!strings.Contains(e.Note, "decode carry") || !strings.Contains(e.Note, "the checkpoint is kept") {
		t.Fatalf("state %s, entry %+v; want a failed run and the service scheduled again", j.State, e)
	}
	var kept string
	if err := pool.QueryRow(ctx, `SELECT carry::text FROM venturi_job_all WHERE id = $1`, uuidString(r.ID)).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != `{"N": "seven"}` {
		t.Fatalf("carry %s after the failed run, want the checkpoint kept", kept)
	}
}
