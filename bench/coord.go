package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Scenario 12: durable coordination (venturi; River has no signals or memoized steps).
//
// (a) Wait/signal round trip. N jobs return WaitForSignal on their first run; once all
// wait, the bench signals them. Latency: one signal at a time, from the Signal call to
// the first line of the resumed run (one process clock) and to Await returning the
// completed job (the durable end, as another process sees it). Throughput: 8 goroutines
// signal all N jobs as fast as they can; round trips/s from the first Signal call until
// the database shows none waiting or runnable, against the same N fresh no-op jobs
// enqueued by 8 producers (one enqueue per transaction) and worked to the end.
//
// (b) Memoized steps. M jobs of K steps each, drained end to end by a worker in the bench
// process: each step a no-op returning an int, run bare (the baseline), through Step
// (its memo written in its own statement) or through StepTx (each step in a transaction
// of its own: begin, read the memo, write it, commit); a replay variant runs the Step
// job once, pauses for zero, and reads the K memos back in its second run. Cost per step:
// the extra wall time per job over the baseline's, divided by K, at the throughput each
// variant reaches; each step call is also timed in the handler (p50/p99).
//
// Every worker runs with venturi.Config{} in the bench process (pgxpool's default pool).

const (
	kindCoordWait  = "bench_coord_wait"
	kindCoordSteps = "bench_coord_steps"
	coordSignal    = "go"
)

// coordSizes sizes scenario 12.
type coordSizes struct {
	waitJobs  int // throughput round trips
	latency   int // sequential round trips
	stepJobs  int
	stepsEach int
}

var (
	fullCoord  = coordSizes{waitJobs: 5_000, latency: 500, stepJobs: 2_000, stepsEach: 10}
	quickCoord = coordSizes{waitJobs: 1_000, latency: 100, stepJobs: 300, stepsEach: 10}
)

// CoordWaitTask waits for coordSignal on its first run; the run after the wait notes its
// start, consumes the signal and completes.
type CoordWaitTask struct{}

// Kind names the task.
func (CoordWaitTask) Kind() string { return kindCoordWait }

// Handle waits, or resumes.
func (CoordWaitTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *coordState) (venturi.Outcome, error) {
	if _, waited := run.Waited(); !waited {
		return venturi.WaitForSignal(time.Hour, coordSignal), nil
	}
	s.resumed(run.ID())
	if _, err := run.Signals(ctx, coordSignal); err != nil {
		return venturi.Outcome{}, err
	}
	return venturi.Completed(), nil
}

// CoordStepsTask runs K no-op steps: bare, through Step, through StepTx, or through Step
// twice (replay: the second run reads the memos back).
type CoordStepsTask struct {
	Mode string `json:"mode"` // plain, step, steptx, replay
	K    int    `json:"k"`
}

// Kind names the task.
func (CoordStepsTask) Kind() string { return kindCoordSteps }

// Handle runs the steps, timing each step call.
func (t CoordStepsTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *coordState) (venturi.Outcome, error) {
	for i := range t.K {
		name := fmt.Sprintf("s%d", i)
		t0 := time.Now()
		var err error
		switch t.Mode {
		case "plain":
			_ = noopStep(i)
		case "step", "replay":
			_, err = venturi.Step(ctx, run, name, func(context.Context) (int, error) { return noopStep(i), nil })
		case "steptx":
			err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				_, err := venturi.StepTx(ctx, run, tx, name, func(context.Context, pgx.Tx) (int, error) { return noopStep(i), nil })
				return err
			})
		}
		if err != nil {
			return venturi.Outcome{}, err
		}
		if t.Mode != "replay" || run.RunCount() > 1 {
			s.step(time.Since(t0))
		}
	}
	if t.Mode == "replay" && run.RunCount() == 1 {
		return venturi.PauseIn(0), nil
	}
	return venturi.Completed(), nil
}

// CoordNoopTask is the reference of the round trips: a fresh job that does nothing.
type CoordNoopTask struct{}

// Kind names the task.
func (CoordNoopTask) Kind() string { return "bench_coord_noop" }

// Handle does nothing.
func (CoordNoopTask) Handle(context.Context, *venturi.Run[struct{}], *coordState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// noopStep is a step's work: nothing.
func noopStep(i int) int { return i }

// coordState collects the handlers' times.
type coordState struct {
	pool     *pgxpool.Pool
	mu       sync.Mutex
	resumeAt map[ulid.ULID]time.Time
	steps    hist
}

func (s *coordState) resumed(id ulid.ULID) {
	now := time.Now()
	s.mu.Lock()
	s.resumeAt[id] = now
	s.mu.Unlock()
}

func (s *coordState) resumedAt(id ulid.ULID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.resumeAt[id]
	return t, ok
}

func (s *coordState) step(d time.Duration) {
	s.mu.Lock()
	s.steps.add(d.Microseconds())
	s.mu.Unlock()
}

// coordReport is scenario 12's results: values per repetition, by metric, in order.
type coordReport struct {
	metrics []string
	vals    map[string][]float64
	intro   []string
}

func (c *coordReport) add(metric string, v float64) {
	if c.vals == nil {
		c.vals = map[string][]float64{}
	}
	if _, ok := c.vals[metric]; !ok {
		c.metrics = append(c.metrics, metric)
	}
	c.vals[metric] = append(c.vals[metric], v)
}

func (b *bencher) scenarioCoord(ctx context.Context) error {
	sz := fullCoord
	if b.o.quick {
		sz = quickCoord
	}
	c := &coordReport{}
	c.intro = append(c.intro, fmt.Sprintf("Wait/signal: %d jobs wait, then are signalled by 8 goroutines (throughput); %d signalled one at a time (latency). "+
		"Steps: %d jobs of %d no-op steps each, drained by the worker. Worker with `venturi.Config{}` in the bench process (pgxpool's default pool of max(4, NumCPU) connections).",
		sz.waitJobs, sz.latency, sz.stepJobs, sz.stepsEach))
	for rep := range b.o.reps {
		load, _ := loadAvg1()
		logf("coord: repetition %d of %d (1-minute load average %.2f)", rep+1, b.o.reps, load)
		c.add("1-minute load average at the repetition's start", load)
		if err := b.coordWait(ctx, c, sz); err != nil {
			return fmt.Errorf("wait/signal: %w", err)
		}
		if err := b.coordSteps(ctx, c, sz); err != nil {
			return fmt.Errorf("steps: %w", err)
		}
	}
	b.rep.coord = c
	return nil
}

// coordWorker starts a worker in the bench process with T registered.
func coordWorker[T venturi.Handler[*coordState, C], C any](ctx context.Context, pool *pgxpool.Pool, s *coordState) (*venturi.Worker[*coordState], error) {
	w, err := venturi.NewWorker(pool, s, venturi.Config{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	venturi.MustRegister[T](w)
	return w, w.Start(ctx)
}

// waitUntil polls cond every 2 ms until it holds, or fails after limit.
func waitUntil(ctx context.Context, limit time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done after %v", what, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// countState counts the jobs of kind in state.
func (b *bencher) countState(ctx context.Context, kind, state string) (int, error) {
	var n int
	err := b.admin.QueryRow(ctx, `SELECT count(*) FROM `+venturiSchema+`.venturi_job_all WHERE kind = $1 AND state = $2::`+venturiSchema+`.venturi_job_state`, kind, state).Scan(&n)
	return n, err
}

func (b *bencher) coordWait(ctx context.Context, c *coordReport, sz coordSizes) error {
	if err := resetJobs(ctx, b.admin); err != nil {
		return err
	}
	pool, err := poolFor(ctx, b.o.url, venturiSchema, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	s := &coordState{pool: pool, resumeAt: map[ulid.ULID]time.Time{}}
	w, err := coordWorker[CoordWaitTask](ctx, pool, s)
	if err != nil {
		return err
	}
	defer w.Stop(context.Background()) //nolint:errcheck // stopped below; this covers errors
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	enqueueWaiting := func(n int) ([]ulid.ULID, error) {
		tasks := make([]venturi.Task, n)
		for i := range tasks {
			tasks[i] = CoordWaitTask{}
		}
		var ids []ulid.ULID
		for len(tasks) > 0 {
			k := min(len(tasks), 1000)
			res, err := q.EnqueueMany(ctx, tasks[:k])
			if err != nil {
				return nil, err
			}
			for _, r := range res {
				ids = append(ids, r.ID)
			}
			tasks = tasks[k:]
		}
		return ids, waitUntil(ctx, 5*time.Minute, "jobs to wait", func() (bool, error) {
			k, err := b.countState(ctx, kindCoordWait, "waiting")
			return k == n, err
		})
	}

	// Latency: one round trip at a time.
	ids, err := enqueueWaiting(sz.latency)
	if err != nil {
		return err
	}
	var toRun, toAwait hist
	for _, id := range ids {
		t0 := time.Now()
		if _, err := q.Signal(ctx, id, coordSignal, nil, ""); err != nil {
			return err
		}
		j, err := q.Await(ctx, id)
		if err != nil {
			return err
		}
		done := time.Since(t0)
		if j.State != venturi.StateCompleted {
			return fmt.Errorf("job %s ended %s", id, j.State)
		}
		at, ok := s.resumedAt(id)
		if !ok {
			return fmt.Errorf("job %s completed without its resumed run noting its start", id)
		}
		toRun.add(at.Sub(t0).Microseconds())
		toAwait.add(done.Microseconds())
	}
	c.add("wait/signal, one at a time: p50 Signal call → resumed run's first line (ms)", toRun.quantile(0.5))
	c.add("wait/signal, one at a time: p99 Signal call → resumed run's first line (ms)", toRun.quantile(0.99))
	c.add("wait/signal, one at a time: p50 Signal call → Await returns the completed job (ms)", toAwait.quantile(0.5))
	c.add("wait/signal, one at a time: p99 Signal call → Await returns the completed job (ms)", toAwait.quantile(0.99))

	// Throughput: every job signalled by 8 goroutines.
	if err := resetJobs(ctx, b.admin); err != nil {
		return err
	}
	ids, err = enqueueWaiting(sz.waitJobs)
	if err != nil {
		return err
	}
	var next atomic.Int64
	var sigErr error
	var once sync.Once
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(ids)); i = next.Add(1) - 1 {
				if _, err := q.Signal(ctx, ids[i], coordSignal, nil, ""); err != nil {
					once.Do(func() { sigErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if sigErr != nil {
		return sigErr
	}
	signalled := time.Since(start)
	if err := waitUntil(ctx, 5*time.Minute, "signalled jobs to complete", func() (bool, error) {
		k, err := b.countState(ctx, kindCoordWait, "completed")
		return k == sz.waitJobs, err
	}); err != nil {
		return err
	}
	took := time.Since(start)
	c.add(fmt.Sprintf("wait/signal, %d jobs signalled by 8 goroutines: round trips/s (to the last completion)", sz.waitJobs), float64(sz.waitJobs)/took.Seconds())
	c.add(fmt.Sprintf("wait/signal, %d jobs signalled by 8 goroutines: Signal calls/s", sz.waitJobs), float64(sz.waitJobs)/signalled.Seconds())
	if err := w.Stop(ctx); err != nil {
		return err
	}

	// The reference: as many fresh no-op jobs, one enqueue per transaction from 8
	// producers, worked to the end.
	if err := resetJobs(ctx, b.admin); err != nil {
		return err
	}
	w2, err := coordWorker[CoordNoopTask](ctx, pool, s)
	if err != nil {
		return err
	}
	defer w2.Stop(context.Background()) //nolint:errcheck
	next.Store(0)
	start = time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(sz.waitJobs); i = next.Add(1) - 1 {
				if _, err := q.Enqueue(ctx, CoordNoopTask{}); err != nil {
					once.Do(func() { sigErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if sigErr != nil {
		return sigErr
	}
	if err := waitUntil(ctx, 5*time.Minute, "fresh jobs to complete", func() (bool, error) {
		k, err := b.countState(ctx, CoordNoopTask{}.Kind(), "completed")
		return k == sz.waitJobs, err
	}); err != nil {
		return err
	}
	c.add(fmt.Sprintf("reference: %d fresh no-op jobs enqueued by 8 producers: jobs/s (to the last completion)", sz.waitJobs), float64(sz.waitJobs)/time.Since(start).Seconds())
	return w2.Stop(ctx)
}

func (b *bencher) coordSteps(ctx context.Context, c *coordReport, sz coordSizes) error {
	perJob := map[string]float64{}
	for _, mode := range []string{"plain", "step", "steptx", "replay"} {
		if err := resetJobs(ctx, b.admin); err != nil {
			return err
		}
		pool, err := poolFor(ctx, b.o.url, venturiSchema, 0)
		if err != nil {
			return err
		}
		s := &coordState{pool: pool, resumeAt: map[ulid.ULID]time.Time{}}
		q := venturi.NewQueue(pool, venturi.QueueConfig{})
		tasks := make([]venturi.Task, sz.stepJobs)
		for i := range tasks {
			tasks[i] = CoordStepsTask{Mode: mode, K: sz.stepsEach}
		}
		if _, err := q.EnqueueMany(ctx, tasks); err != nil {
			pool.Close()
			return err
		}
		start := time.Now()
		w, err := coordWorker[CoordStepsTask](ctx, pool, s)
		if err != nil {
			pool.Close()
			return err
		}
		err = waitUntil(ctx, 10*time.Minute, mode+" jobs to complete", func() (bool, error) {
			k, err := b.countState(ctx, kindCoordSteps, "completed")
			return k == sz.stepJobs, err
		})
		took := time.Since(start)
		if serr := w.Stop(ctx); err == nil {
			err = serr
		}
		pool.Close()
		if err != nil {
			return err
		}
		jobsPerSec := float64(sz.stepJobs) / took.Seconds()
		perJob[mode] = took.Seconds() * 1000 / float64(sz.stepJobs)
		label := map[string]string{"plain": "no Step (baseline)", "step": "Step", "steptx": "StepTx, a transaction per step",
			"replay": "Step, then PauseIn(0) and a second run that reads the memos back"}[mode]
		c.add(fmt.Sprintf("steps, %d jobs × %d: %s: jobs/s", sz.stepJobs, sz.stepsEach, label), jobsPerSec)
		if mode != "plain" {
			what := "step call"
			if mode == "replay" {
				what = "memo read back (second run)"
			}
			c.add(fmt.Sprintf("steps: %s: p50 %s in the handler (ms)", label, what), s.steps.quantile(0.5))
			c.add(fmt.Sprintf("steps: %s: p99 %s in the handler (ms)", label, what), s.steps.quantile(0.99))
			c.add(fmt.Sprintf("steps: %s: cost per step over the baseline (ms of drain time per step)", label),
				(perJob[mode]-perJob["plain"])/float64(sz.stepsEach))
		}
	}
	return nil
}

// coordMarkdown writes scenario 12's section.
func (c *coordReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 12: durable coordination (venturi)\n\n")
	for _, l := range c.intro {
		fmt.Fprintln(b, l)
	}
	fmt.Fprintf(b, "\n| Metric | venturi |\n|---|---|\n")
	for _, m := range c.metrics {
		fmt.Fprintf(b, "| %s | %s |\n", m, cell(c.vals[m]))
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b, "- Latencies are from the bench process's clock: the Signal call starts before the signal is sent; "+
		"\"resumed run's first line\" is the handler of the run after the wait; Await returns once the job's end is committed and notified.")
	fmt.Fprintln(b, "- Round trips/s run from the first Signal call to the database showing every job completed (polled every 2 ms); "+
		"the reference is the same number of fresh no-op jobs, one Enqueue per transaction from 8 producers, timed the same way.")
	fmt.Fprintln(b, "- Cost per step: (the variant's drain time per job − the baseline's) / steps per job, at the concurrency the worker reaches; "+
		"the step calls' own latencies are the handler's timing of each call. Replay: the drain covers two runs per job, so its cost per step includes a pause per job.")
}
