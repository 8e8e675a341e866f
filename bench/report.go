package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// row is one measured quantity across libraries (or backlog sizes).
type row struct {
	scenario string
	metric   string
	higher   bool                 // higher is better
	vals     map[string][]float64 // column -> one value per repetition
	ratioOf  string               // numerator column
	ratioTo  []string             // denominator columns, first is the target's
	target   string               // e.g. ">= 1.3x", "<= 2 ms"
	check    func(r *row) (bool, bool)

	graphileTo []string // graphile-worker columns of the venturi/graphile ratio (graphilePeers), nil where it does not run
}

// graphilePeers are the denominators of the venturi/graphile ratios, tuned first.
var graphilePeers = []string{libGraphileTuned, libGraphile}

type report struct {
	rows    []*row
	backlog []*row
	notes   []string

	sustained      []*row   // scenario 8, one value per library
	sustainedIntro string   // what scenario 8 ran
	sustainedNotes []string // per-library remarks on the measurement
	sustainedCSV   string   // where the samples were written, if anywhere
	sustainedPNG   string   // where the plot was written, if anywhere

	history []string                     // scenario 9's table
	kinds   map[string]map[int][]float64 // scenario 10: library -> kinds -> jobs/s per repetition
	flow    *flowReport                  // scenario 11
	coord   *coordReport                 // scenario 12
	events  *eventsReport                // scenario 13
	ops     *opsReport                   // scenario 14
	pgb     *pgbReport                   // scenario 17

	handoff  *handoffReport  // scenario 20
	fanin    *faninReport    // scenario 21
	chunks   *chunksReport   // scenario 22
	backdrop *backdropReport // -backdrop: scenarios 4 and 11 with and without it

	graphileSkip string // why graphile-worker did not run although this run has its rows ("" otherwise)
}

func (r *report) get(list *[]*row, scenario, metric string, higher bool) *row {
	for _, x := range *list {
		if x.scenario == scenario && x.metric == metric {
			return x
		}
	}
	x := &row{scenario: scenario, metric: metric, higher: higher, vals: map[string][]float64{}}
	*list = append(*list, x)
	return x
}

func (r *report) add(scenario, metric string, higher bool, lib string, v float64) *row {
	x := r.get(&r.rows, scenario, metric, higher)
	x.vals[lib] = append(x.vals[lib], v)
	return x
}

func (r *report) addBacklog(scenario, metric string, higher bool, col string, v float64) *row {
	x := r.get(&r.backlog, scenario, metric, higher)
	x.vals[col] = append(x.vals[col], v)
	return x
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtNum(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func cell(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%s–%s)", fmtNum(median(v)), fmtNum(slices.Min(v)), fmtNum(slices.Max(v)))
}

func (x *row) ratio(to string) (float64, bool) {
	a, b := x.vals[x.ratioOf], x.vals[to]
	if len(a) == 0 || len(b) == 0 || median(b) == 0 {
		return 0, false
	}
	return median(a) / median(b), true
}

func (x *row) ratioCell() string { return x.ratioCellOf(x.ratioTo) }

// graphileRatioCell is the venturi/graphile column.
func (x *row) graphileRatioCell() string { return x.ratioCellOf(x.graphileTo) }

func (x *row) ratioCellOf(tos []string) string {
	var parts []string
	for _, to := range tos {
		r, ok := x.ratio(to)
		if !ok {
			continue
		}
		s := fmt.Sprintf("%.2f×", r)
		if len(tos) > 1 {
			switch to {
			case libRiver, libGraphile:
				s += " vs default"
			case libRiverTuned, libGraphileTuned:
				s += " vs tuned"
			default:
				s += " vs " + to
			}
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, "; ")
}

func (x *row) metCell() string {
	if x.check == nil {
		return ""
	}
	ok, known := x.check(x)
	switch {
	case !known:
		return "?"
	case ok:
		return "yes"
	default:
		return "**no**"
	}
}

// ratioAtLeast: the first ratio column must be >= k (throughput) or, for lower-is-better
// rows, <= k.
func ratioAtLeast(k float64) func(*row) (bool, bool) {
	return func(x *row) (bool, bool) {
		if len(x.ratioTo) == 0 {
			return false, false
		}
		r, ok := x.ratio(x.ratioTo[0])
		return r >= k, ok
	}
}

func ratioAtMost(k float64) func(*row) (bool, bool) {
	return func(x *row) (bool, bool) {
		if len(x.ratioTo) == 0 {
			return false, false
		}
		r, ok := x.ratio(x.ratioTo[0])
		return r <= k, ok
	}
}

func valueAtMost(col string, k float64) func(*row) (bool, bool) {
	return func(x *row) (bool, bool) {
		v := x.vals[col]
		return median(v) <= k, len(v) > 0
	}
}

type environment struct {
	lines    []string
	pg       []string
	duration time.Duration
}

func describe(ctx context.Context, admin *pgxpool.Pool, o options) (*environment, error) {
	e := &environment{}
	cpu := "unknown"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := "unknown"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				var kb int64
				fmt.Sscan(strings.TrimPrefix(l, "MemTotal:"), &kb)
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	kernel := "unknown"
	if b, err := exec.Command("uname", "-sr").Output(); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	nproc := runtime.NumCPU()
	e.lines = append(e.lines,
		fmt.Sprintf("CPU: %d × %s (nproc %d)", nproc, cpu, nproc),
		"Memory: "+mem,
		"Kernel: "+kernel,
		"Go: "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH,
		"Libraries: venturi (this repository, ../venturi), github.com/riverqueue/river v0.51.2 with riverpgxv5, pgx v5.12.0",
		"Database: PostgreSQL on the same machine (scripts/pg.sh), shared with the benchmark process and, on a shared host, other load",
	)
	var version string
	if err := admin.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return nil, err
	}
	e.pg = append(e.pg, "version(): "+version)
	for _, s := range []string{"fsync", "synchronous_commit", "shared_buffers", "max_connections", "wal_level", "max_wal_size", "checkpoint_timeout"} {
		var v string
		if err := admin.QueryRow(ctx, "SHOW "+s).Scan(&v); err != nil {
			return nil, err
		}
		e.pg = append(e.pg, s+" = "+v)
	}
	return e, nil
}

func (r *report) markdown(env *environment, o options) string {
	var b strings.Builder
	mode := "full"
	if o.quick {
		mode = "quick"
	}
	fmt.Fprintf(&b, "# venturi vs River (and graphile-worker) benchmark results\n\n")
	fmt.Fprintf(&b, "Mode: **%s** (`%s`), %d repetitions per library, libraries alternated run by run; run took %s on %s.\n\n",
		mode, strings.Join(append([]string{"bench"}, redactArgs(os.Args[1:])...), " "), o.reps, env.duration.Round(time.Second), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Cells are median (min–max) over the repetitions. Ratios are venturi's median over River's median from this same run:\n")
	fmt.Fprintf(&b, "above 1 is better for venturi on throughput rows (jobs/s), below 1 is better on latency and memory rows.\n")
	fmt.Fprintf(&b, "River \"default\" is its documented configuration (FetchCooldown 100ms, FetchPollInterval 1s, MaxWorkers 100);\n")
	fmt.Fprintf(&b, "\"tuned\" is FetchCooldown 2ms, FetchPollInterval 20ms, MaxWorkers 2000. Enqueue scenarios use an insert-only River client with defaults.\n")
	fmt.Fprintf(&b, "graphile-worker %s (Node; scenarios 4, 5 and 7) \"default\" is its documented configuration (concurrency 1, pollInterval 2000ms, maxPoolSize 10, no local queue, no batched completion);\n", graphileVersion)
	fmt.Fprintf(&b, "\"tuned\" is its performance guide's batching: concurrency 24, localQueue size 500, completeJobBatchDelay 0, pollInterval 20ms. It deletes a job when it completes and keeps no journal.\n")
	fmt.Fprintf(&b, "venturi always runs with venturi.Config{} and venturi.NewQueue(pool, venturi.QueueConfig{}).\n\n")
	fmt.Fprintf(&b, "## Machine\n\n")
	for _, l := range env.lines {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	fmt.Fprintf(&b, "\n## PostgreSQL\n\n")
	for _, l := range env.pg {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	if len(r.rows) > 0 {
		r.mainTable(&b)
	}
	if len(r.backlog) > 0 {
		small, big := fmt.Sprintf("%d", o.sz.backlogs[0]), fmt.Sprintf("%d", o.sz.backlogs[1])
		fmt.Fprintf(&b, "\n## Scenario 6: backlog independence (venturi)\n\n")
		fmt.Fprintf(&b, "| Measurement | Metric | backlog %s | backlog %s | %s/%s | Target | Met |\n", small, big, big, small)
		fmt.Fprintf(&b, "|---|---|---|---|---|---|---|\n")
		for _, x := range r.backlog {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", x.scenario, x.metric,
				cell(x.vals[small]), cell(x.vals[big]), x.ratioCell(), x.target, x.metCell())
		}
	}
	if len(r.sustained) > 0 {
		r.sustainedMarkdown(&b)
	}
	if len(r.history) > 0 {
		r.historyMarkdown(&b)
	}
	if len(r.kinds) > 0 {
		r.kindsMarkdown(&b, o.sz.e2eJobs)
	}
	if r.flow != nil {
		r.flow.markdown(&b)
	}
	if r.coord != nil {
		r.coord.markdown(&b)
	}
	if r.events != nil {
		r.events.markdown(&b)
	}
	if r.ops != nil {
		r.ops.markdown(&b)
	}
	if r.pgb != nil {
		r.pgb.markdown(&b)
	}
	if r.backdrop != nil {
		r.backdrop.markdown(&b)
	}
	if r.handoff != nil {
		r.handoff.markdown(&b)
	}
	if r.fanin != nil {
		r.fanin.markdown(&b)
	}
	if r.chunks != nil {
		r.chunks.markdown(&b)
	}
	if len(r.notes) > 0 {
		fmt.Fprintf(&b, "\n## Notes\n\n")
		for _, n := range r.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// skipGraphile notes that graphile-worker's rows were not run, and why.
func (r *report) skipGraphile(reason string) {
	r.graphileSkip = reason
	r.notes = append(r.notes, "graphile-worker not run: "+reason+".")
}

// mainTable writes the table of scenarios 1–5 and 7, with graphile-worker's columns when
// it ran or was to run.
func (r *report) mainTable(b *strings.Builder) {
	withGraphile := r.graphileSkip != ""
	for _, x := range r.rows {
		withGraphile = withGraphile || len(x.vals[libGraphile])+len(x.vals[libGraphileTuned]) > 0
	}
	fmt.Fprintf(b, "\n## Scenarios 1–5, 7 and 15–19\n\n")
	if withGraphile {
		fmt.Fprintf(b, "| Scenario | Metric | venturi | River default | River tuned | venturi/River | graphile default | graphile tuned | venturi/graphile | Target | Met |\n")
		fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	} else {
		fmt.Fprintf(b, "| Scenario | Metric | venturi | River default | River tuned | venturi/River | Target | Met |\n")
		fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|\n")
	}
	rows := append([]*row(nil), r.rows...)
	slices.SortStableFunc(rows, func(a, b *row) int {
		if c := cmp.Compare(leadNum(a.scenario), leadNum(b.scenario)); c != 0 {
			return c
		}
		na, _, _ := strings.Cut(a.scenario, " ")
		nb, _, _ := strings.Cut(b.scenario, " ")
		return strings.Compare(na, nb) // 6. before 6b.
	})
	for _, x := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |", x.scenario, x.metric,
			cell(x.vals[libVenturi]), cell(x.vals[libRiver]), cell(x.vals[libRiverTuned]), x.ratioCell())
		if withGraphile {
			gd, gt, gr := cell(x.vals[libGraphile]), cell(x.vals[libGraphileTuned]), x.graphileRatioCell()
			if len(x.graphileTo) > 0 && r.graphileSkip != "" {
				gd, gt = "not run", "not run"
			}
			fmt.Fprintf(b, " %s | %s | %s |", gd, gt, gr)
		}
		fmt.Fprintf(b, " %s | %s |\n", x.target, x.metCell())
	}
}

// leadNum is the number a scenario's name starts with (4 of "4. end-to-end", 6 of
// "6b. ..."), for ordering rows: scenario 15 after 7, not after 1.
func leadNum(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// sustainedMarkdown writes the section of scenario 8, whose cells are single runs.
func (r *report) sustainedMarkdown(b *strings.Builder) {
	one := func(v []float64) string {
		if len(v) == 0 {
			return "—"
		}
		return fmtNum(median(v))
	}
	fmt.Fprintf(b, "\n## Scenario 8: sustained load\n\n%s\n\n", r.sustainedIntro)
	fmt.Fprintf(b, "| Metric | venturi | River tuned | graphile-worker tuned | venturi/River | venturi/graphile-worker | Target | Met |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.sustained {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", x.metric,
			one(x.vals[libVenturi]), one(x.vals[libRiverTuned]), one(x.vals[libGraphileTuned]), x.ratioCell(),
			x.graphileRatioCell(), x.target, x.metCell())
	}
	fmt.Fprintf(b, "\n")
	for _, n := range r.sustainedNotes {
		fmt.Fprintf(b, "- %s\n", n)
	}
	fmt.Fprintf(b, "- %s\n", sustainedMethod)
	if r.sustainedCSV != "" {
		fmt.Fprintf(b, "- Raw samples: [`%s`](%s).\n", r.sustainedCSV, r.sustainedCSV)
	}
	if r.sustainedPNG != "" {
		fmt.Fprintf(b, "\n![Scenario 8: table size, dead tuples and p99 latencies over time](%s)\n", r.sustainedPNG)
	}
}

// sustainedMethod says how scenario 8 measures.
const sustainedMethod = "Method: one producer in the bench process commits one transaction every 10 ms " +
	"(venturi `EnqueueManyTx`, delayed jobs with `After(1s)`; River `InsertManyTx`, delayed jobs with `ScheduledAt` now()+1s) " +
	"(graphile-worker: its SQL `add_jobs`, delayed jobs with run_at now()+1s) " +
	"into an empty table while one worker process (venturi `Config{RetainCompleted: 30s}`; River tuned with `CompletedJobRetentionPeriod` 30s; " +
	"graphile-worker tuned, `graphile/worker.mjs`, which keeps no finished job: a completion deletes the row) works no-op jobs. " +
	"Every transaction first reads its now(), which is the rows' created_at in both libraries, and stamps it, and for delayed jobs now()+1s (their due time, exactly), into the payload: " +
	"latencies run from those row timestamps to the handler's first line, read on the worker's clock and moved onto the database clock by an offset measured against clock_timestamp() at start-up. " +
	"enqueue→handler is for immediate jobs and includes the insert and the commit; due→handler is for delayed jobs. " +
	"Percentiles come from log-linear histograms (within 1.6%) merged over the windows. " +
	"Table size is pg_total_relation_size (heap, indexes, TOAST); dead tuples are pg_stat_user_tables.n_dead_tup; rows by state are counted at every sample. " +
	"River's scheduler promotes scheduled jobs every 5 s (its fixed default), with a 5 s look-ahead. " +
	"graphile-worker has no states: its available rows are the unlocked ones due, scheduled the unlocked ones due later, running the locked ones; " +
	"its schema is not recreated between runs (its table is emptied)."

// redactArgs returns a copy of command-line arguments in which the password of every URL
// (-db URL, -db=URL) is replaced by "xxxxx": reports are committed, and the project's
// PostgreSQL URLs carry a password (scripts/pg.sh).
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		prefix, raw := "", a
		if j := strings.Index(a, "="); j >= 0 && strings.HasPrefix(a, "-") {
			prefix, raw = a[:j+1], a[j+1:]
		}
		if !strings.Contains(raw, "://") {
			continue
		}
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			out[i] = prefix + u.Redacted()
		} else if err != nil {
			out[i] = prefix + "(unparsable URL)"
		}
	}
	return out
}
