package main

import (
	"fmt"
	"slices"
	"strings"
)

// Targets of issue 11.
const (
	flowTputTarget = 0.7 // gated throughput over plain, while the limit is not the bottleneck
	flowFairTarget = 2.0 // other keys' p99 wait, flooded over unflooded
)

// flowVariantDesc is what the report says about a throughput variant.
type flowVariantDesc struct {
	name, label string
	target      bool // the >= flowTputTarget of plain target applies
}

// flowReport collects scenario 11's measurements. Every series holds one value per
// repetition, in repetition order, so that values of one index come from one repetition.
type flowReport struct {
	jobs      int
	slotLimit int
	kindLimit int
	rateN     int
	variants  []flowVariantDesc
	tput      map[string][]float64 // variant -> jobs/s
	cpuWorker map[string][]float64 // variant -> worker CPU ms per 1k jobs
	cpuDB     map[string][]float64 // variant -> PostgreSQL backend CPU ms per 1k jobs

	othersOrder []int                        // the numbers of other keys, as run
	fair        map[int]map[string][]float64 // other keys -> case -> their p99 wait (ms)
	fairP50     map[int]map[string][]float64 // other keys -> case -> their p50 wait (ms)
	fairPos     map[int]map[string][]float64 // other keys -> case -> their p99 claim position (jobs claimed before)
	floodJPS    map[int][]float64            // other keys -> jobs/s of the flooded runs

	loads []float64 // 1-minute load average before each measured run
}

// pairedRatios divides a[i] by b[i] for every repetition both have.
func pairedRatios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// ratioCellOf is median(a)/median(b) with the range and the median of the
// per-repetition ratios a[i]/b[i].
func ratioCellOf(a, b []float64) (string, float64, bool) {
	if len(a) == 0 || len(b) == 0 || median(b) == 0 {
		return "—", 0, false
	}
	r := median(a) / median(b)
	s := fmt.Sprintf("%.2f×", r)
	if p := pairedRatios(a, b); len(p) > 1 {
		s += fmt.Sprintf(" (per repetition %.2f–%.2f, median %.2f)", slices.Min(p), slices.Max(p), median(p))
	}
	return s, r, true
}

// met is the Met column: yes, **no**, or ? when unknown.
func met(ok, known bool) string {
	switch {
	case !known:
		return "?"
	case ok:
		return "yes"
	}
	return "**no**"
}

// markdown writes scenario 11's section.
func (f *flowReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 11: flow control (venturi)\n\n")
	fmt.Fprintf(b, "Throughput: %d no-op jobs enqueued first (batches of 1,000), then drained by one worker process with `venturi.Config{}` "+
		"(Concurrency 100, Prefetch up to 1,000), as in scenario 4; the variants rotate their order every repetition. "+
		"Cells: jobs/s, median (min–max); \"/ plain\" is the ratio of the medians, with the range and the median of the ratios to the plain run of the same repetition.\n\n", f.jobs)
	fmt.Fprintf(b, "| Variant | Configuration | jobs/s | / plain | Target | Met | worker CPU ms per 1k jobs | PostgreSQL backend CPU ms per 1k jobs | plain's CPU per job / the variant's |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|\n")
	plain := f.tput["plain"]
	plainCPU := f.cpuPerJob("plain")
	for _, v := range f.variants {
		ratio, target, m := "—", "", ""
		if v.name != "plain" {
			var r float64
			var ok bool
			ratio, r, ok = ratioCellOf(f.tput[v.name], plain)
			if v.target {
				target, m = fmt.Sprintf("≥ %.1f× plain", flowTputTarget), met(r >= flowTputTarget, ok)
			}
		}
		cpu := "—"
		if c := f.cpuPerJob(v.name); v.name != "plain" && c > 0 && plainCPU > 0 {
			cpu = fmt.Sprintf("%.2f×", plainCPU/c)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v.name, v.label, cell(f.tput[v.name]), ratio, target, m,
			cell(f.cpuWorker[v.name]), cell(f.cpuDB[v.name]), cpu)
	}
	fmt.Fprintf(b, "\nThe last column divides the CPU time per job (worker and PostgreSQL backends, medians) of the plain runs by the variant's: "+
		"where the machine's CPU is the bottleneck, as on this 2-core machine that runs the worker and the server, it predicts the throughput ratio, and it moves far less with other load than jobs/s do.\n")
	if len(f.othersOrder) > 0 {
		flood := int(float64(f.jobs) * flowFloodShare)
		fmt.Fprintf(b, "\nFairness: %d jobs, %d of them (%.0f%%) in partition `%s` and enqueued first, then the other %d round-robin over K other partitions. "+
			"**unflooded**: only the other keys' %d jobs, enqueued the same way; **flooded**: all %d; **FIFO**: all %d without partitions (plain jobs, claimed in enqueue order), for reference. "+
			"A job's wait is its claim (`attempted_at`) minus the run's first claim (every job was enqueued before the worker started), from the database. "+
			"Cells: the other keys' wait in ms, median (min–max) over the repetitions.\n\n",
			f.jobs, flood, flowFloodShare*100, flowFloodKey, f.jobs-flood, f.jobs-flood, f.jobs, f.jobs)
		fmt.Fprintf(b, "| K other keys | p99 unflooded | p99 flooded | flooded / unflooded | Target | Met | p50 unflooded | p50 flooded | p99 FIFO | FIFO / unflooded | flooded runs, jobs/s |\n")
		fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, k := range f.othersOrder {
			p99, p50 := f.fair[k], f.fairP50[k]
			ratio, r, ok := ratioCellOf(p99[fairFlooded], p99[fairUnflooded])
			fifo, _, _ := ratioCellOf(p99[fairFIFO], p99[fairUnflooded])
			fmt.Fprintf(b, "| %d | %s | %s | %s | ≤ %.0f× | %s | %s | %s | %s | %s | %s |\n", k,
				cell(p99[fairUnflooded]), cell(p99[fairFlooded]), ratio, flowFairTarget, met(r <= flowFairTarget, ok),
				cell(p50[fairUnflooded]), cell(p50[fairFlooded]), cell(p99[fairFIFO]), fifo, cell(f.floodJPS[k]))
		}
		if len(f.fairPos) > 0 {
			fmt.Fprintf(b, "\nThe same runs by claim position, which the machine's speed does not move: the p99 over the other keys' jobs of the number of jobs claimed before each (in earlier claims). "+
				"Cells: median (min–max) over the repetitions.\n\n")
			fmt.Fprintf(b, "| K other keys | unflooded | flooded | flooded / unflooded | FIFO | FIFO / unflooded |\n|---|---|---|---|---|---|\n")
			for _, k := range f.othersOrder {
				p := f.fairPos[k]
				r1, _, _ := ratioCellOf(p[fairFlooded], p[fairUnflooded])
				r2, _, _ := ratioCellOf(p[fairFIFO], p[fairUnflooded])
				fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s |\n", k, cell(p[fairUnflooded]), cell(p[fairFlooded]), r1, cell(p[fairFIFO]), r2)
			}
		}
	}
	fmt.Fprintln(b)
	fmt.Fprintf(b, "- Limits are set so that they are not the bottleneck: a worker holds at most Concurrency + Prefetch = 1,100 claimed jobs, "+
		"all counted as running by the gates; the kind and queue limits are %d; the slot limit %d over %d keys allows %d; "+
		"the rate allows %d starts a second in each of %d partitions (%d/s in all). Limits are recorded before the jobs are enqueued (workers deploy before producers), "+
		"so the measured worker finds them unchanged.\n", f.kindLimit, f.slotLimit, flowSlotKeys, f.slotLimit*flowSlotKeys, f.rateN, flowPartitions, f.rateN*flowPartitions)
	if len(f.loads) > 0 {
		fmt.Fprintf(b, "- 1-minute load average before the measured runs: median %.2f, %.2f–%.2f (2 cores).\n", median(f.loads), slices.Min(f.loads), slices.Max(f.loads))
	}
}

// cpuPerJob is the variant's median worker plus backend CPU ms per 1k jobs; 0 when unknown.
func (f *flowReport) cpuPerJob(name string) float64 {
	w, d := f.cpuWorker[name], f.cpuDB[name]
	if len(w) == 0 || len(d) == 0 {
		return 0
	}
	return median(w) + median(d)
}
