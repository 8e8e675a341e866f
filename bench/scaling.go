package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Scenario 15: scaling out. One backlog of no-op jobs, enqueued first (batches of 1,000,
// untimed), is drained by 1, 2 and 4 `bench worker` processes started at once, each with
// venturi.Config{} (River tuned as the reference peer, one client per process), sharing
// the one job table. Aggregate throughput runs from the first process's ready line (the
// time just before its Start) until the database shows no job unfinished (allDone), so
// the later processes' start-up counts against the larger counts. On 2 cores more
// processes cannot add much: the target is that throughput does not collapse, ≥ 0.9× of
// one process in the same repetition. After every run the bench checks that every job was
// completed by exactly one run: venturi's runs = 1 and a journal of exactly one
// "completed" entry of run 1 (River: attempt = 1 and one attempted_by entry). A violation
// is counted, not fatal: it makes the row's check fail.

// scalingProcs are the numbers of worker processes scenario 15 compares; the first is the
// reference of the ratios.
var scalingProcs = []int{1, 2, 4}

// scalingTarget is the least aggregate throughput of more processes over one process's.
const scalingTarget = 0.9

// scalingJobs is scenario 15's backlog: 200,000 jobs, 20,000 with -quick.
func (b *bencher) scalingJobs() int {
	if b.o.quick {
		return 20_000
	}
	return 200_000
}

// scalingRepOrder returns xs in the order repetition rep runs them: as given on even
// repetitions, reversed on odd ones, so that load drifting on the machine during a
// repetition does not favour one end.
func scalingRepOrder(rep int, xs []int) []int {
	out := slices.Clone(xs)
	if rep%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// scalingPlural is "process" or "processes".
func scalingPlural(n int) string {
	if n == 1 {
		return "process"
	}
	return "processes"
}

// scalingMeasured is one drain of scenario 15.
type scalingMeasured struct {
	jps  float64
	cpu  cpuUse
	once scalingOnce
}

// scenario 15: aggregate throughput of 1, 2 and 4 worker processes draining one backlog.
func (b *bencher) scenarioScaling(ctx context.Context) error {
	n := b.scalingJobs()
	head := fmt.Sprintf("15. scaling, %d jobs", n)
	for rep := range b.o.reps {
		for _, lib := range b.order(rep, libVenturi, libRiverTuned) {
			got := map[int]scalingMeasured{}
			for _, procs := range scalingRepOrder(rep, scalingProcs) {
				if _, err := b.drainBacklog(ctx, lib, n); err != nil {
					return err
				}
				load, _ := loadAvg1()
				r, err := b.scalingDrain(ctx, lib, procs, b.o.workerArgs, b.allDone(lib, kindNoop, n))
				if err != nil {
					return err
				}
				once, err := scalingCheckOnce(ctx, b, lib, kindNoop)
				if err != nil {
					return err
				}
				m := scalingMeasured{jps: float64(n) / r.elapsed.Seconds(), cpu: r.cpu, once: once}
				got[procs] = m
				logf("  %s, %d %s %s rep %d: %.0f jobs/s (%v; last process ready %v after the first; load %.1f)",
					head, procs, scalingPlural(procs), lib, rep, m.jps, r.elapsed.Round(time.Millisecond), r.skew.Round(time.Millisecond), load)
				if r.cpu.ok {
					logf("  %s, %d %s %s rep %d: CPU workers %v, PostgreSQL backends %v", head, procs, scalingPlural(procs), lib, rep, r.cpu.worker, r.cpu.db)
				}
				if bad := once.violations(n); bad > 0 {
					logf("  %s, %d %s %s rep %d: %d of %d jobs NOT run exactly once: %s", head, procs, scalingPlural(procs), lib, rep, bad, n, once)
				} else {
					logf("  %s, %d %s %s rep %d: every job completed by exactly one run", head, procs, scalingPlural(procs), lib, rep)
				}
			}
			b.scalingRows(head, lib, n, got)
		}
	}
	b.rep.notes = append(b.rep.notes, "Scaling (15): one backlog of no-op jobs, enqueued first, drained by 1, 2 and 4 `bench worker` processes started at once "+
		"(venturi.Config{} each; River tuned, one client per process). jobs/s runs from the first process's ready line to the moment the database shows no job unfinished; "+
		"the later processes' start-up counts against the larger counts. \"÷ 1 process\" is the ratio to the one-process run of the same library and repetition "+
		"(median and range of the per-repetition ratios). CPU is all worker processes' (from their ready lines) and their PostgreSQL backends'. "+
		"\"jobs not run exactly once\" counts, per run, jobs missing, not completed, or whose runs ≠ 1 or journal is not exactly one completed entry of run 1 "+
		"(River: attempt ≠ 1 or attempted_by not one entry); the cell's maximum is the worst run.")
	return nil
}

// scalingRows reports one repetition of one library of scenario 15, in the order the
// report lists them.
func (b *bencher) scalingRows(head, lib string, n int, got map[int]scalingMeasured) {
	base, haveBase := got[scalingProcs[0]]
	for _, procs := range scalingProcs {
		m, ok := got[procs]
		if !ok {
			continue
		}
		name := fmt.Sprintf("%s, %d worker %s", head, procs, scalingPlural(procs))
		x := b.rep.add(name, "jobs/s (durably completed, all processes)", true, lib, m.jps)
		x.ratioOf, x.ratioTo = libVenturi, []string{libRiverTuned}
		if procs != scalingProcs[0] && haveBase && base.jps > 0 {
			y := b.rep.add(name, fmt.Sprintf("jobs/s ÷ %d %s (same repetition)", scalingProcs[0], scalingPlural(scalingProcs[0])), true, lib, m.jps/base.jps)
			y.target, y.check = fmt.Sprintf("≥ %.1f× of %d %s", scalingTarget, scalingProcs[0], scalingPlural(scalingProcs[0])), scalingMedianAtLeast(libVenturi, scalingTarget)
		}
		if m.cpu.ok {
			c1 := b.rep.add(name, "worker CPU ms per 1k jobs (all processes)", false, lib, float64(m.cpu.worker.Milliseconds())*1000/float64(n))
			c1.ratioOf, c1.ratioTo = libVenturi, []string{libRiverTuned}
			c2 := b.rep.add(name, "PostgreSQL backend CPU ms per 1k jobs", false, lib, float64(m.cpu.db.Milliseconds())*1000/float64(n))
			c2.ratioOf, c2.ratioTo = libVenturi, []string{libRiverTuned}
		}
	}
	for _, procs := range scalingProcs {
		if m, ok := got[procs]; ok {
			z := b.rep.add(fmt.Sprintf("%s, every process count", head), "jobs not run exactly once, per run", false, lib, float64(m.once.violations(n)))
			z.target, z.check = "0 (no job runs twice)", scalingAllZero(libVenturi)
		}
	}
}

// scalingMedianAtLeast: the median of column col is at least k.
func scalingMedianAtLeast(col string, k float64) func(*row) (bool, bool) {
	return func(x *row) (bool, bool) {
		v := x.vals[col]
		return median(v) >= k, len(v) > 0
	}
}

// scalingAllZero: every value of column col is zero (a single violation fails the row).
func scalingAllZero(col string) func(*row) (bool, bool) {
	return func(x *row) (bool, bool) {
		v := x.vals[col]
		return len(v) > 0 && slices.Max(v) == 0 && slices.Min(v) == 0, len(v) > 0
	}
}

// scalingOnce is what the database says about how often a run's jobs ran.
type scalingOnce struct {
	rows         int64 // jobs of the kind in the table
	notCompleted int64 // not in state completed
	runsNotOne   int64 // venturi runs ≠ 1; River attempt ≠ 1
	journalBad   int64 // venturi: journal not exactly one completed entry of run 1; River: attempted_by not one entry
	bad          int64 // jobs with any of the three above
}

// violations is how many of the n jobs enqueued did not run exactly once: the bad rows,
// and the difference between the rows found and n (jobs lost, or jobs that appeared).
func (c scalingOnce) violations(n int) int64 {
	d := c.rows - int64(n)
	if d < 0 {
		d = -d
	}
	return c.bad + d
}

// String details the counts for a log line.
func (c scalingOnce) String() string {
	return fmt.Sprintf("%d rows, %d not completed, %d with runs ≠ 1, %d with a journal other than one completed run",
		c.rows, c.notCompleted, c.runsNotOne, c.journalBad)
}

// scalingCheckOnce counts the jobs of kind that did not run exactly once (a full scan of
// the job table, untimed, after the drain).
func scalingCheckOnce(ctx context.Context, b *bencher, lib, kind string) (scalingOnce, error) {
	var q string
	switch lib {
	case libVenturi:
		const journalBad = `(journal_moved <> 0 OR jsonb_array_length(journal) <> 1
			OR journal->0->>'event' IS DISTINCT FROM 'completed' OR journal->0->>'run' IS DISTINCT FROM '1')`
		q = `SELECT count(*),
			count(*) FILTER (WHERE state <> 'completed'),
			count(*) FILTER (WHERE runs <> 1),
			count(*) FILTER (WHERE ` + journalBad + `),
			count(*) FILTER (WHERE state <> 'completed' OR runs <> 1 OR ` + journalBad + `)
			FROM ` + finishedTable(lib) + ` WHERE kind = $1`
	case libRiver, libRiverTuned:
		const attemptsBad = `coalesce(cardinality(attempted_by), 0) <> 1`
		q = `SELECT count(*),
			count(*) FILTER (WHERE state <> 'completed'),
			count(*) FILTER (WHERE attempt <> 1),
			count(*) FILTER (WHERE ` + attemptsBad + `),
			count(*) FILTER (WHERE state <> 'completed' OR attempt <> 1 OR ` + attemptsBad + `)
			FROM ` + jobTable(lib) + ` WHERE kind = $1`
	default:
		return scalingOnce{}, fmt.Errorf("scaling: no run check for %s", lib)
	}
	var c scalingOnce
	err := b.admin.QueryRow(ctx, q, kind).Scan(&c.rows, &c.notCompleted, &c.runsNotOne, &c.journalBad, &c.bad)
	return c, err
}

// scalingRun is what scalingDrain measured.
type scalingRun struct {
	elapsed time.Duration // from the first process's ready time to done
	skew    time.Duration // the last process's ready time minus the first's
	cpu     cpuUse        // every process's CPU since its ready line; the backends serving them
}

// scalingDrain starts procs `bench worker` processes of lib at once, waits until done
// reports true (polled as workProc polls), reads the processes' and their backends' CPU
// time and stops them.
func (b *bencher) scalingDrain(ctx context.Context, lib string, procs int, args []string, done func(ctx context.Context) (bool, time.Duration, error)) (scalingRun, error) {
	ps := make([]*workerProc, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps[i], errs[i] = startWorkerProc(ctx, b.o.url, lib, "", args...)
		}()
	}
	wg.Wait()
	defer func() { // on an error: the processes not stopped yet
		for _, p := range ps {
			if p != nil {
				p.kill()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return scalingRun{}, err
	}
	first, last := ps[0].t0, ps[0].t0
	for _, p := range ps[1:] {
		if p.t0.Before(first) {
			first = p.t0
		}
		if p.t0.After(last) {
			last = p.t0
		}
	}
	end, err := scalingPoll(ctx, lib, done)
	if err != nil {
		return scalingRun{}, err
	}
	r := scalingRun{elapsed: end.Sub(first), skew: last.Sub(first)}
	r.cpu.ok = true
	for _, p := range ps {
		c, ok := procCPU(p.cmd.Process.Pid)
		r.cpu.worker += c - p.cpu0
		r.cpu.ok = r.cpu.ok && ok
	}
	d, ok := b.dbCPU(ctx)
	r.cpu.db, r.cpu.ok = d, r.cpu.ok && ok
	stopping := ps
	ps = nil
	for i, p := range stopping {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.stop() }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return scalingRun{}, fmt.Errorf("%s worker stop: %w", lib, err)
	}
	return r, nil
}

// scalingPoll calls done until it reports true and returns that moment; it waits between
// calls as long as done asks, and gives up after 15 minutes (as workProc does).
func scalingPoll(ctx context.Context, lib string, done func(ctx context.Context) (bool, time.Duration, error)) (time.Time, error) {
	deadline := time.Now().Add(15 * time.Minute)
	for {
		ok, wait, err := done(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if ok {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: jobs not completed in time", lib)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return time.Time{}, fmt.Errorf("%s: %w", lib, ctx.Err())
		case <-t.C:
		}
	}
}
