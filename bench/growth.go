package main

import (
	"context"
	"fmt"
	"time"
)

// Scenario 19: growth. The end-to-end run of scenario 4 at three backlog sizes, 10,000,
// 100,000 and 1,000,000 no-op jobs (quick: 10,000, 50,000 and 100,000): the backlog is
// enqueued first (enqueueBulk: batches of 1,000, untimed; about 35,000 jobs/s on the
// loaded 2-core machine, so a million load in half a minute, and two producers loaded no
// faster), the table analyzed and checkpointed, then one `bench worker` process with
// venturi.Config{} (River tuned as the reference peer) drains it; jobs/s from the
// worker's ready line until the database shows no job unfinished, with the worker's and
// its PostgreSQL backends' CPU per 1,000 jobs. What a job costs must not grow with the
// backlog: the target is the largest backlog's throughput ≥ 0.8× the middle one's in the
// same repetition.

// growthTarget is the least throughput of the largest backlog over the middle one.
const growthTarget = 0.8

// growthSizes are scenario 19's backlogs, smallest first: the target compares the last
// with the one before it.
func (b *bencher) growthSizes() []int {
	if b.o.quick {
		return []int{10_000, 50_000, 100_000}
	}
	return []int{10_000, 100_000, 1_000_000}
}

// growthMeasured is one drain of scenario 19.
type growthMeasured struct {
	jps float64
	cpu cpuUse
}

// scenario 19: end-to-end cost at growing backlogs.
func (b *bencher) scenarioGrowth(ctx context.Context) error {
	sizes := b.growthSizes()
	mid, big := sizes[len(sizes)-2], sizes[len(sizes)-1]
	for rep := range b.o.reps {
		for _, lib := range b.order(rep, libVenturi, libRiverTuned) {
			got := map[int]growthMeasured{}
			for _, n := range scalingRepOrder(rep, sizes) {
				enq, err := b.drainBacklog(ctx, lib, n)
				if err != nil {
					return err
				}
				load, _ := loadAvg1()
				r, err := b.workUntilRun(ctx, lib, "", b.o.workerArgs, b.allDone(lib, kindNoop, n))
				if err != nil {
					return err
				}
				done, err := completedCount(ctx, b.admin, lib, kindNoop)
				if err != nil {
					return err
				}
				if done != int64(n) {
					return fmt.Errorf("%s, %d jobs: %d completed", lib, n, done)
				}
				m := growthMeasured{jps: float64(n) / r.elapsed.Seconds(), cpu: r.cpu}
				got[n] = m
				logf("  19. growth, %d jobs %s rep %d: %.0f jobs/s (%v; enqueued in %v, %.0f jobs/s; load %.1f)",
					n, lib, rep, m.jps, r.elapsed.Round(time.Millisecond), enq.Round(time.Millisecond), float64(n)/enq.Seconds(), load)
				if r.cpu.ok {
					logf("  19. growth, %d jobs %s rep %d: CPU worker %v, PostgreSQL backends %v", n, lib, rep, r.cpu.worker, r.cpu.db)
				}
			}
			b.growthRows(lib, sizes, got)
			if r, ok := growthRatio(got, mid, big); ok {
				x := b.rep.add(fmt.Sprintf("19. growth, %d vs %d jobs", big, mid), fmt.Sprintf("jobs/s at %d ÷ at %d (same repetition)", big, mid), true, lib, r)
				x.target, x.check = fmt.Sprintf("≥ %.1f× (falls ≤ %.0f%% from %d to %d)", growthTarget, (1-growthTarget)*100, mid, big), scalingMedianAtLeast(libVenturi, growthTarget)
				logf("  19. growth %s rep %d: %d jobs at %.2f× the throughput of %d", lib, rep, big, r, mid)
			}
		}
	}
	b.rep.notes = append(b.rep.notes, "Growth (19): scenario 4's end-to-end run at three backlog sizes: the no-op jobs enqueued first (batches of 1,000, untimed), "+
		"the table analyzed and checkpointed, then one `bench worker` process (venturi.Config{}; River tuned) drains them; jobs/s from the worker's ready line "+
		"until the database shows no job unfinished, CPU of the worker and its PostgreSQL backends per 1,000 jobs. The sizes alternate in order by repetition; "+
		"the ratio row is the largest backlog's throughput over the middle one's in the same repetition (median and range).")
	return nil
}

// growthRows reports one repetition of one library of scenario 19, smallest backlog first.
func (b *bencher) growthRows(lib string, sizes []int, got map[int]growthMeasured) {
	for _, n := range sizes {
		m, ok := got[n]
		if !ok {
			continue
		}
		name := fmt.Sprintf("19. growth, %d jobs enqueued first, 1 worker process", n)
		x := b.rep.add(name, "jobs/s (durably completed)", true, lib, m.jps)
		x.ratioOf, x.ratioTo = libVenturi, []string{libRiverTuned}
		if m.cpu.ok {
			c1 := b.rep.add(name, "worker CPU ms per 1k jobs", false, lib, float64(m.cpu.worker.Milliseconds())*1000/float64(n))
			c1.ratioOf, c1.ratioTo = libVenturi, []string{libRiverTuned}
			c2 := b.rep.add(name, "PostgreSQL backend CPU ms per 1k jobs", false, lib, float64(m.cpu.db.Milliseconds())*1000/float64(n))
			c2.ratioOf, c2.ratioTo = libVenturi, []string{libRiverTuned}
		}
	}
}

// growthRatio is the throughput at backlog big over that at backlog mid.
func growthRatio(got map[int]growthMeasured, mid, big int) (float64, bool) {
	a, okA := got[big]
	m, okM := got[mid]
	if !okA || !okM || m.jps <= 0 {
		return 0, false
	}
	return a.jps / m.jps, true
}
