package main

//go:generate go run ./kindsgen

import (
	"context"
	"fmt"
	"strings"

	"github.com/riverqueue/river"

	"github.com/venturi-dev/venturi"
)

// Scenario 10: claim cost must not grow with the number of kinds a worker serves. The
// same 100,000 no-op jobs, spread round-robin over 1, 10, 100 and 500 kinds, drained end
// to end by one worker process that registered exactly those kinds, venturi with its
// defaults and River tuned (all kinds in its one default queue). The kinds are distinct Go
// types (kinds_gen.go), as an application declares them.

// kindName is implemented by the generated marker types k001…k500.
type kindName interface{ kindName() string }

// KindTask is venturi's no-op job of the kind its marker N names.
type KindTask[N kindName] struct {
	N int `json:"n"`
}

// Kind names the task by its marker.
func (KindTask[N]) Kind() string { var n N; return n.kindName() }

// Handle does nothing.
func (KindTask[N]) Handle(ctx context.Context, run *venturi.Run[struct{}], s *benchState) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// KindArgs is River's no-op job of the kind its marker N names.
type KindArgs[N kindName] struct {
	N int `json:"n"`
}

// Kind names the job by its marker.
func (KindArgs[N]) Kind() string { var n N; return n.kindName() }

type kindWorker[N kindName] struct {
	river.WorkerDefaults[KindArgs[N]]
}

// Work does nothing.
func (kindWorker[N]) Work(ctx context.Context, job *river.Job[KindArgs[N]]) error { return nil }

// kindOps registers one kind with either library and makes its jobs.
type kindOps struct {
	name     string
	register func(w *venturi.Worker[*benchState])
	addRiver func(ws *river.Workers)
	task     func(n int) venturi.Task
	args     func(n int) river.JobArgs
}

func kindOpsOf[N kindName]() kindOps {
	var n N
	return kindOps{
		name:     n.kindName(),
		register: func(w *venturi.Worker[*benchState]) { venturi.MustRegister[KindTask[N]](w) },
		addRiver: func(ws *river.Workers) { river.AddWorker(ws, &kindWorker[N]{}) },
		task:     func(i int) venturi.Task { return KindTask[N]{N: i} },
		args:     func(i int) river.JobArgs { return KindArgs[N]{N: i} },
	}
}

// kindCounts are the numbers of kinds scenario 10 measures.
var kindCounts = []int{1, 10, 100, 500}

// scenario 10: end-to-end throughput over many kinds.
func (b *bencher) scenarioKinds(ctx context.Context) error {
	n := b.o.sz.e2eJobs
	for rep := range b.o.reps {
		for _, k := range kindCounts {
			for _, lib := range b.order(rep+k, libVenturi, libRiverTuned) {
				if err := resetJobs(ctx, b.admin); err != nil {
					return err
				}
				if err := b.enqueueKinds(ctx, lib, n, k); err != nil {
					return err
				}
				if err := b.settle(ctx, lib); err != nil {
					return err
				}
				args := append([]string{"-kinds", fmt.Sprint(k)}, b.o.workerArgs...)
				el, _, _, err := b.workUntilArgs(ctx, lib, "", args, b.allDone(lib, "", n))
				if err != nil {
					return err
				}
				done, err := completedCount(ctx, b.admin, lib, "")
				if err != nil {
					return err
				}
				if done != int64(n) {
					return fmt.Errorf("%s, %d kinds: %d of %d jobs completed", lib, k, done, n)
				}
				jps := float64(n) / el.Seconds()
				logf("  10. %d kinds %s rep %d: %.0f jobs/s (%v)", k, lib, rep, jps, el.Round(1e6))
				b.rep.addKinds(lib, k, jps)
			}
		}
	}
	return nil
}

// enqueueKinds enqueues n no-op jobs spread round-robin over the first k kinds, untimed.
func (b *bencher) enqueueKinds(ctx context.Context, lib string, n, k int) error {
	return b.enqueueBulkOf(ctx, lib, n,
		func(i int) venturi.Task { return manyKinds[i%k].task(i) },
		func(i int) river.JobArgs { return manyKinds[i%k].args(i) })
}

// addKinds records one run of scenario 10.
func (r *report) addKinds(lib string, kinds int, jps float64) {
	if r.kinds == nil {
		r.kinds = map[string]map[int][]float64{}
	}
	if r.kinds[lib] == nil {
		r.kinds[lib] = map[int][]float64{}
	}
	r.kinds[lib][kinds] = append(r.kinds[lib][kinds], jps)
}

// kindsMarkdown writes scenario 10's section.
func (r *report) kindsMarkdown(b *strings.Builder, jobs int) {
	fmt.Fprintf(b, "\n## Scenario 10: many kinds, end to end\n\n")
	fmt.Fprintf(b, "%d no-op jobs spread round-robin over K kinds (distinct Go types), drained by one worker process that registered those K kinds; "+
		"venturi with its defaults, River tuned (every kind in its default queue). Cells: jobs/s, median (min–max).\n\n", jobs)
	fmt.Fprintf(b, "| Library |")
	for _, k := range kindCounts {
		fmt.Fprintf(b, " %d kind(s) |", k)
	}
	fmt.Fprintf(b, " 100 kinds / 1 | 500 kinds / 1 | Target | Met |\n|---|")
	fmt.Fprintf(b, "%s---|---|---|---|\n", strings.Repeat("---|", len(kindCounts)))
	for _, lib := range []string{libVenturi, libRiverTuned} {
		v := r.kinds[lib]
		if v == nil {
			continue
		}
		name := map[string]string{libVenturi: "venturi", libRiverTuned: "River tuned"}[lib]
		fmt.Fprintf(b, "| %s |", name)
		for _, k := range kindCounts {
			fmt.Fprintf(b, " %s |", cell(v[k]))
		}
		r100, r500 := median(v[100])/median(v[1]), median(v[500])/median(v[1])
		target, met := "", ""
		if lib == libVenturi {
			target, met = ">= 0.9x", "no"
			if r100 >= 0.9 && r500 >= 0.9 {
				met = "yes"
			}
		}
		fmt.Fprintf(b, " %.2fx | %.2fx | %s | %s |\n", r100, r500, target, met)
	}
}
