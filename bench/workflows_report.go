package main

import (
	"fmt"
	"strings"

	"github.com/venturi-dev/venturi"
)

// variantTable is a table of metrics (rows) by variant (columns), one value per
// repetition, in repetition order; with a base variant, every other variant's column has
// a ratio column over it (ratio of the medians, with the range and median of the
// per-repetition ratios).
type variantTable struct {
	variants []string // column order
	base     string   // the ratios' denominator ("" for none)
	metrics  []string // row order: first added first
	vals     map[string]map[string][]float64
}

func newVariantTable(variants ...string) *variantTable {
	return &variantTable{variants: variants, vals: map[string]map[string][]float64{}}
}

// add records a repetition's value of metric for variant.
func (t *variantTable) add(metric, variant string, v float64) {
	m, ok := t.vals[metric]
	if !ok {
		m = map[string][]float64{}
		t.vals[metric] = m
		t.metrics = append(t.metrics, metric)
	}
	m[variant] = append(m[variant], v)
}

// get returns the values of metric for variant.
func (t *variantTable) get(metric, variant string) []float64 { return t.vals[metric][variant] }

// markdown writes the table; labels name the columns (a variant's own name otherwise).
func (t *variantTable) markdown(b *strings.Builder, labels map[string]string) {
	label := func(v string) string {
		if l, ok := labels[v]; ok {
			return l
		}
		return v
	}
	var others []string
	if t.base != "" {
		for _, v := range t.variants {
			if v != t.base {
				others = append(others, v)
			}
		}
	}
	fmt.Fprintf(b, "| Metric |")
	for _, v := range t.variants {
		fmt.Fprintf(b, " %s |", label(v))
	}
	for _, v := range others {
		fmt.Fprintf(b, " %s / %s |", label(v), label(t.base))
	}
	fmt.Fprintf(b, "\n|---|%s%s\n", strings.Repeat("---|", len(t.variants)), strings.Repeat("---|", len(others)))
	for _, m := range t.metrics {
		fmt.Fprintf(b, "| %s |", m)
		for _, v := range t.variants {
			fmt.Fprintf(b, " %s |", cell(t.vals[m][v]))
		}
		for _, v := range others {
			r, _, _ := ratioCellOf(t.vals[m][v], t.vals[m][t.base])
			fmt.Fprintf(b, " %s |", r)
		}
		fmt.Fprintln(b)
	}
}

// handoffReport is scenario 20's section.
type handoffReport struct {
	n       int
	t       *variantTable
	offsets []clockOffset // per repetition
}

func (h *handoffReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 20: workflow handoff latency (venturi)\n\n")
	fmt.Fprintf(b, "A chain of %d no-op workflow members, each `Needs` the one before, enqueued in one `EnqueueWorkflow` and worked by a worker in the bench process "+
		"(`venturi.Config{}`); the first %d links are left out as warm-up. Cells are the repetitions' percentiles, median (min–max).\n\n", h.n, handoffWarm)
	h.t.markdown(b, nil)
	fmt.Fprintln(b)
	fmt.Fprintln(b, "- Every time is the database's except the handler's: *upstream finish* is the upstream job's `finished_at`, the now() of the statement that finished it, "+
		"which precedes its commit by the statement's execution and the commit's WAL flush (so every latency from it is an upper bound by that much); "+
		"*released* is the downstream job's `run_at`, set to the now() of the settle that released it; *claim* is its `attempted_at`, the now() of the claim; "+
		"*handler start* is read on the worker's clock in the handler's first line and moved onto the database clock by an offset measured against `clock_timestamp()` before the run.")
	fmt.Fprintln(b, "- The path measured: the upstream's finish commits; the workflow is settled (the downstream job goes from blocked to available) "+
		"either by the finishing transaction itself, and then *finish → released* is 0, or by a worker's resolver woken by the finish's notification; "+
		"the released job's kind is notified, and the worker claims the job and starts its handler. "+
		"*finish to finish per link* is the chain's duration over its links: a handoff plus a run and its finish.")
	if len(h.offsets) > 0 {
		var offs, errs []float64
		for _, o := range h.offsets {
			offs, errs = append(offs, float64(o.offsetUs)), append(errs, float64(o.rttUs)/2)
		}
		fmt.Fprintf(b, "- Clock offset (database minus bench process), µs: %s; its uncertainty (half the probe's round trip), µs: %s.\n", cell(offs), cell(errs))
	}
}

// faninReport is scenario 21's section.
type faninReport struct {
	n int
	t *variantTable
}

func (f *faninReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 21: a %d-member fan-in (venturi)\n\n", f.n)
	fmt.Fprintf(b, "Every variant's jobs are enqueued first, then one `bench worker -wf` process (`venturi.Config{}`) drains them, as scenario 4 does; "+
		"the variants rotate their order every repetition. Cells: median (min–max); ratios over plain: of the medians, with the range and median of the per-repetition ratios.\n\n")
	f.t.markdown(b, map[string]string{fanInPlain: "plain", fanInGrouped: "group", fanInSpawned: "spawned", fanInBatched: "batch"})
	first, rest := fanInSplit(f.n, venturi.MaxWorkflowNodes)
	fmt.Fprintln(b)
	fmt.Fprintf(b, "- **plain**: %d `NoopTask` jobs (batches of 1,000). **group**: a root, a group of %d members that each `Needs` the root, and a fan-in node that `Needs` the group", f.n, f.n)
	if len(rest) > 0 {
		fmt.Fprintf(b, " (one enqueue writes at most %d nodes, `MaxWorkflowNodes`, so the root, the group, the fan-in and %d members are one `EnqueueWorkflow` "+
			"with the group open, the other %d members %d `AddToWorkflow` call(s), then `SealGroup`, all before the worker starts)", venturi.MaxWorkflowNodes, first, f.n-first, len(rest))
	}
	fmt.Fprintf(b, ". **spawned**: a root whose run spawns the %d members (`Run.Spawn`, written with its completion) and a fan-in node that `Needs` the root "+
		"(and so everything it spawned). **batch**: %d members in a batch (`NewBatch`, the members past one enqueue added to it open, then `SealBatch`) whose `OnEnd` callback is the fan-in task: no root, the members run at once. "+
		"Root, members and fan-in (callback) are no-ops; members/s counts the members only (the variants' root and fan-in are two jobs more).\n", f.n, f.n)
	fmt.Fprintln(b, "- *worker start → every job ended*: from the worker's ready line until the database shows no job blocked, available, scheduled or running (polled as in scenario 4); "+
		"it includes the root's run and the fan-in's handoff and run. The database-clock rate runs from the first member's claim (`attempted_at`) to the last member's `finished_at`.")
	fmt.Fprintln(b, "- *released* is a job's `run_at` (the now() of the settle that released it), *claimed* its `attempted_at`, *finished* its `finished_at` (the now() of the statement that finished it, before its commit): "+
		"*last member finished → fan-in claimed* is the fan-in node's start latency after the last member's commit, an upper bound by the finish's execution and WAL flush. *last member committed → fan-in claimed* is measured from the commit itself (`pg_xact_commit_timestamp` of the last member's history row), shown when the server has `track_commit_timestamp = on`.")
	fmt.Fprintln(b, "- CPU per 1,000 members is the worker process's and its PostgreSQL backends' (the root's and fan-in's share included); WAL is everything the server wrote during the drain.")
}

// chunksReport is scenario 22's section.
type chunksReport struct {
	n, size int
	t       *variantTable
}

func (c *chunksReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 22: chunks against one by one (venturi)\n\n")
	fmt.Fprintf(b, "%d jobs enqueued first (batches of 1,000), then drained by one `bench worker -chunks` process (`venturi.Config{}`, Concurrency 100); "+
		"every job's handler writes one row (`INSERT … ON CONFLICT DO NOTHING` into a table with a primary key) through a pool of the worker's own (pgxpool's default size). "+
		"**one-by-one**: a handler per job, one INSERT each. **chunks**: `RegisterChunks` with `Size: %d` (Linger 50 ms, the default), one INSERT of every item's row per call. "+
		"The two alternate their order every repetition. Cells: median (min–max).\n\n", c.n, c.size)
	c.t.markdown(b, nil)
	fmt.Fprintln(b)
	fmt.Fprintln(b, "- Handler calls are counted in the table (each call stamps its rows with its own number). Each chunked job is still claimed, leased and finished as a job of its own: "+
		"what chunks save is the handler's statements, not the queue's. CPU is the worker process's and its PostgreSQL backends' (the handlers' pool included); WAL is everything the server wrote during the drain.")
}

// backdropReport is the section of the runs made with and without the backdrop
// (-backdrop N): each run's metrics without and with N blocked workflow jobs.
type backdropReport struct {
	n, nodes int
	kind     string // backdropBlocked or backdropScheduled
	t        *variantTable
	loads    []string // how long each load took, as logged
}

// The backdrop's conditions, the columns of its table.
const (
	backdropOff = "without"
	backdropOn  = "with"
)

func newBackdropReport(n, nodes int, kind string) *backdropReport {
	t := newVariantTable(backdropOff, backdropOn)
	t.base = backdropOff
	return &backdropReport{n: n, nodes: nodes, kind: kind, t: t}
}

func (r *backdropReport) markdown(b *strings.Builder) {
	if r.kind == backdropScheduled {
		fmt.Fprintf(b, "\n## Backdrop: %d scheduled jobs (venturi)\n\n", r.n)
		fmt.Fprintf(b, "The runs of scenarios 4 and 11 made twice per repetition: without, and with %d plain jobs due in a year in `venturi_job`: "+
			"the rows of the blocked backdrop (`-backdrop-kind blocked`), loaded as scheduled jobs outside any workflow, so the table has the same rows in the same order. "+
			"Cells: median (min–max); with / without: ratio of the medians, with the range and median of the per-repetition ratios.\n\n", r.n)
		r.t.markdown(b, map[string]string{backdropOff: "without", backdropOn: fmt.Sprintf("with %d scheduled", r.n)})
		fmt.Fprintln(b)
		r.notes(b)
		return
	}
	fmt.Fprintf(b, "\n## Backdrop: %d blocked workflow jobs (venturi)\n\n", r.n)
	fmt.Fprintf(b, "The runs of scenarios 4 and 11 made twice per repetition: without, and with %d blocked workflow jobs in `venturi_job` "+
		"(%d workflows of up to %d nodes, each node needing an open group that is never sealed). "+
		"Cells: median (min–max); with / without: ratio of the medians, with the range and median of the per-repetition ratios.\n\n",
		r.n, (r.n+r.nodes-1)/r.nodes, r.nodes)
	r.t.markdown(b, map[string]string{backdropOff: "without", backdropOn: fmt.Sprintf("with %d blocked", r.n)})
	fmt.Fprintln(b)
	r.notes(b)
}

// notes are the backdrop section's notes on how its rows were made and loaded.
func (r *backdropReport) notes(b *strings.Builder) {
	fmt.Fprintln(b, "- The backdrop is made once by the engine (`EnqueueWorkflow`), then its job, node and workflow rows are copied aside; "+
		"a run with it inserts them back (untimed) when they are not already there, one without it empties the tables as every run does. "+
		"Between two runs with it, the other jobs are deleted and `venturi_job` vacuumed, where a run without it starts from a truncated table. "+
		"The order alternates by repetition (without first in even repetitions), so that the rows are loaded about once per two repetitions.")
	if len(r.loads) > 0 {
		fmt.Fprintf(b, "- Loads: %s.\n", strings.Join(r.loads, "; "))
	}
}
