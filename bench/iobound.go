package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Scenario 16 (issue 15): I/O-bound handlers.
//
// Scenario 4's method with handlers that wait instead of returning at once: N jobs of the
// no-op kind enqueued first (batches of 1,000, untimed), then one worker process drains
// them with 1,000 handlers, each job's handler sleeping 10 ms (a timer: simulated I/O that
// takes no CPU). venturi (Config{Concurrency: 1000}, otherwise defaults), River tuned
// (FetchCooldown 2 ms, FetchPollInterval 20 ms, the default queue's MaxWorkers 1000) and
// graphile-worker tuned (scenario 4's tuned batching with concurrency 1,000 and a local
// queue of 1,001: ioboundGraphileConfig) alternate run by run, their order flipping every
// repetition. 1,000 handlers of 10 ms bound the drain at 100,000 jobs/s; what keeps a
// library below that is what it spends per job (claims, completions, handler dispatch),
// which the CPU rows show.

const (
	ioboundSleep       = 10 * time.Millisecond
	ioboundConcurrency = 1000
	ioboundJobs        = 100_000
	ioboundQuickJobs   = 10_000
)

// ioboundWorkerArgs are the flags of `bench worker` for venturi and River: the handler's
// sleep and the concurrency (venturi Config.Concurrency, River's default-queue
// MaxWorkers), after -worker-args so that they always define the scenario.
func (b *bencher) ioboundWorkerArgs() []string {
	return append(slices.Clone(b.o.workerArgs),
		"-sleep", ioboundSleep.String(), "-concurrency", strconv.Itoa(ioboundConcurrency))
}

// ioboundGraphileConfig is worker.mjs's configuration for scenario 16: graphileConfig's
// tuned batching (pollInterval 20 ms, completeJobBatchDelay 0, maxPoolSize 10) with
// concurrency 1,000 and a local queue of concurrency + 1 jobs, the size graphile-worker's
// release notes recommend (tuned's 500 would be below the concurrency, which it warns
// about: half the handlers would wait for a second fetch). maxPoolSize stays at 10 (it
// warns that this is below the concurrency): a task holds no connection here; the pool
// serves the LISTEN connection, the local queue's fetches and the batched completions. In
// quick runs a pool of 50 drained no faster than 10: the Node process's one thread is what
// bounds it (its CPU time is nearly the whole drain). Then the handler's sleep, -sleep-ms.
func ioboundGraphileConfig() []string {
	args := ioboundSetFlags(graphileConfig(true), map[string]string{
		"-concurrency":      strconv.Itoa(ioboundConcurrency),
		"-local-queue-size": strconv.Itoa(ioboundConcurrency + 1),
	})
	return append(args, "-sleep-ms", strconv.FormatInt(ioboundSleep.Milliseconds(), 10))
}

// ioboundSetFlags returns the "-name value" pairs of args with the values of the names in
// set replaced; a name not in args is the caller's error and panics.
func ioboundSetFlags(args []string, set map[string]string) []string {
	out := slices.Clone(args)
	seen := 0
	for i := 0; i+1 < len(out); i += 2 {
		if v, ok := set[out[i]]; ok {
			out[i+1] = v
			seen++
		}
	}
	if seen != len(set) {
		panic(fmt.Sprintf("ioboundSetFlags: %v not all in %v", set, args))
	}
	return out
}

func (b *bencher) scenarioIOBound(ctx context.Context) error {
	n := ioboundJobs
	if b.o.quick {
		n = ioboundQuickJobs
	}
	if err := b.ioboundSetupGraphile(ctx); err != nil {
		return err
	}
	name := fmt.Sprintf("16. I/O-bound handlers (%v sleep, concurrency %d), %d jobs, 1 worker process", ioboundSleep, ioboundConcurrency, n)
	for rep := range b.o.reps {
		for _, lib := range b.order(rep, libVenturi, libRiverTuned, libGraphileTuned) {
			if _, err := b.drainBacklog(ctx, lib, n); err != nil {
				return err
			}
			r, err := b.ioboundRun(ctx, lib, n)
			if err != nil {
				return err
			}
			done := r.runs // graphile-worker deletes completed jobs: none left (allDone) and n runs
			if !isGraphile(lib) {
				if done, err = completedCount(ctx, b.admin, lib, kindNoop); err != nil {
					return err
				}
			}
			if done != int64(n) {
				return fmt.Errorf("%s: %d of %d jobs completed", lib, done, n)
			}
			jps := float64(n) / r.elapsed.Seconds()
			logf("  %s %s rep %d: %.0f jobs/s (%v), peak RSS %.1f MiB", name, lib, rep, jps, r.elapsed.Round(time.Millisecond), r.rss)
			x := b.rep.add(name, "jobs/s (durably completed)", true, lib, jps)
			x.target, x.check = "≥ 1× tuned", ratioAtLeast(1)
			y := b.rep.add(name, "worker peak RSS, VmHWM (MiB)", false, lib, r.rss)
			rows := []*row{x, y}
			if r.cpu.ok {
				logf("  %s %s rep %d: CPU worker %v, PostgreSQL backends %v", name, lib, rep, r.cpu.worker, r.cpu.db)
				rows = append(rows,
					b.rep.add(name, "worker CPU ms per 1k jobs", false, lib, float64(r.cpu.worker.Milliseconds())*1000/float64(n)),
					b.rep.add(name, "PostgreSQL backend CPU ms per 1k jobs", false, lib, float64(r.cpu.db.Milliseconds())*1000/float64(n)))
			}
			for _, z := range rows {
				z.ratioOf, z.ratioTo, z.graphileTo = libVenturi, []string{libRiverTuned}, []string{libGraphileTuned}
			}
		}
	}
	note := fmt.Sprintf("Scenario 16 (I/O-bound handlers): scenario 4's method (all jobs enqueued first, one worker process, jobs/s from its start until the database shows none unfinished) "+
		"with every handler sleeping %v on a timer (simulated I/O) and %d handlers: venturi Config{Concurrency: %d}, River tuned with the default queue's MaxWorkers %d",
		ioboundSleep, ioboundConcurrency, ioboundConcurrency, ioboundConcurrency)
	if b.graphile.ready() {
		note += fmt.Sprintf(", graphile-worker tuned with concurrency %d and localQueue size %d (otherwise as in scenario 4: pollInterval 20ms, completeJobBatchDelay 0, maxPoolSize 10), its task awaiting a timer",
			ioboundConcurrency, ioboundConcurrency+1)
	}
	b.rep.notes = append(b.rep.notes, note+fmt.Sprintf(". The handlers alone bound the drain at %.0f jobs/s.", float64(ioboundConcurrency)/ioboundSleep.Seconds()))
	return nil
}

// ioboundRun drains the n jobs of the run with lib's worker, configured for scenario 16.
func (b *bencher) ioboundRun(ctx context.Context, lib string, n int) (workRun, error) {
	done := b.allDone(lib, kindNoop, n)
	if !isGraphile(lib) {
		return b.workUntilRun(ctx, lib, "", b.ioboundWorkerArgs(), done)
	}
	// graphileEnv.start passes scenario 4's configuration: the same start, with this
	// scenario's.
	cmd := b.graphile.command(b.o.url, workerAppName, append([]string{"work", "-task", kindNoop}, ioboundGraphileConfig()...)...)
	p, br, err := startProc(cmd, lib)
	if err != nil {
		return workRun{}, err
	}
	p.gw = newGraphileOut()
	go p.gw.read(br, nil)
	el, rss, cpu, err := b.workProc(ctx, p, lib, done)
	r := workRun{elapsed: el, rss: rss, cpu: cpu, runs: p.gw.runs.Load()}
	if err == nil {
		err = p.gw.err()
	}
	return r, err
}

// ioboundSetupGraphile installs and migrates graphile-worker when scenario 16 runs without
// scenarios 4 and 5, whose presence alone makes the run set it up (wantGraphile), unless
// -libs leaves graphile-worker tuned out. A failed install is reported as in scenario 4:
// its columns say "not run", with the reason in the notes (in CI the run fails).
func (b *bencher) ioboundSetupGraphile(ctx context.Context) error {
	if b.graphile != nil || (b.o.libs != nil && !b.o.libs[libGraphileTuned]) {
		return nil
	}
	o := b.o
	o.only = nil // every scenario: wantGraphile then asks -libs alone
	gw, err := setupGraphile(ctx, o, b.admin)
	if err != nil || gw == nil {
		return err
	}
	b.graphile = gw
	if gw.skip != "" {
		b.rep.skipGraphile(gw.skip)
		return nil
	}
	b.rep.notes = append(b.rep.notes, "Scenario 16: "+gw.describe()+".")
	return nil
}
