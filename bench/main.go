// Command bench compares venturi with River (and, in scenarios 4, 5 and 7, graphile-worker)
// on one PostgreSQL database, alternating the libraries run by run. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

const (
	libVenturi    = "venturi"
	libVenturiSQL = "venturi-sql" // venturi's SQL API (venturi_enqueue), beside Enqueue in scenario 1
	libRiver      = "river"       // River with its documented defaults
	libRiverTuned = "river-tuned" // FetchCooldown 2ms, FetchPollInterval 20ms, MaxWorkers 2000

	libGraphile      = "graphile"       // graphile-worker with its documented defaults (graphileConfig)
	libGraphileTuned = "graphile-tuned" // concurrency 24, localQueue 500, completeJobBatchDelay 0, pollInterval 20ms
)

type sizes struct {
	enqueueDur  time.Duration // scenarios 1 and 2, per run
	batchCalls  int           // scenario 3, calls of 1,000 jobs per run
	e2eJobs     int           // scenario 4
	pickupDur   time.Duration // scenario 5
	backlogs    [2]int        // scenario 6
	backlogJobs int           // scenario 6 claim throughput: jobs worked per run
	sustain     sustainSizes  // scenario 8
}

// sustainSizes sizes scenario 8 (sustained load).
type sustainSizes struct {
	dur       time.Duration // producer run per library
	rateCap   float64       // jobs/s offered at most (immediate and delayed together)
	calibJobs int           // jobs drained to measure each library's maximum rate
	every     time.Duration // sampling period
}

var (
	fullSizes = sizes{3 * time.Second, 50, 100_000, 10 * time.Second, [2]int{10_000, 1_000_000}, 20_000,
		sustainSizes{10 * time.Minute, 10_000, 50_000, 10 * time.Second}}
	quickSizes = sizes{600 * time.Millisecond, 15, 5_000, 2 * time.Second, [2]int{10_000, 100_000}, 2_000,
		sustainSizes{time.Minute, 2_000, 5_000, 5 * time.Second}}
)

type options struct {
	url        string
	quick      bool
	reps       int
	only       map[string]bool
	out        string
	profileDir string
	sameKind   bool
	libs       map[string]bool
	e2eJobs    int
	workerArgs []string
	sz         sizes

	sustainRate float64 // scenario 8: offered jobs/s; 0 calibrates
	sustainCSV  string  // scenario 8: samples file ("" for none)
	sustainPNG  string  // scenario 8: plot file ("" for none)

	historyRuns         int // scenario 9: runs of every job
	historyJobs         int // scenario 9: jobs of the parallel case
	historyParallelRuns int // scenario 9: runs of every job of the parallel case

	flowSlotLimit int             // scenario 11: the slots' limit
	flowOthers    []int           // scenario 11: the numbers of other keys in the fairness runs
	opsJobs       int             // scenario 14: jobs loaded
	opsRequests   int             // scenario 14: requests per page
	flowVariants  map[string]bool // scenario 11: the throughput variants to run (nil: all)

	handoffNodes  int             // scenario 20: links of the chain
	faninMembers  int             // scenario 21: members of the fan-in
	faninVariants map[string]bool // scenario 21: group, spawn, batch (nil: all)
	chunkJobs     int             // scenario 22: jobs per run
	chunkSize     int             // scenario 22: ChunkConfig.Size
	backdrop      int             // scenarios 4 and 11: blocked workflow jobs of the backdrop (0: none)
	backdropNodes int             // nodes per workflow of the backdrop
	backdropKind  string          // the backdrop's jobs: blocked (workflow members) or scheduled (plain, due in a year)
	statements    bool            // scenario 11: log each drain's statements from pg_stat_statements
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "worker":
			if err := workerMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "worker:", err)
				os.Exit(1)
			}
			return
		case "compare":
			if err := compareMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "compare:", err)
				os.Exit(1)
			}
			return
		case "explain-kinds":
			if err := explainKindsMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "explain-kinds:", err)
				os.Exit(1)
			}
			return
		case "explain":
			if err := explainMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "explain:", err)
				os.Exit(1)
			}
			return
		}
	}
	var o options
	var only string
	flag.StringVar(&o.url, "db", defaultURL(), "PostgreSQL URL of the bench database (default $BENCH_DATABASE_URL, else $DATABASE_URL)")
	flag.BoolVar(&o.quick, "quick", false, "smaller sizes (development; about five minutes)")
	flag.IntVar(&o.reps, "reps", 3, "repetitions of every scenario and library")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run: enqueue,dedup,batch,e2e,pickup,backlog,sustained,history,kinds,flow,coord,events,ops,scaling,iobound,pgbouncer,app,growth,handoff,fanin,chunks (default all)")
	flag.IntVar(&o.opsJobs, "ops-jobs", 0, "scenario 14: jobs loaded under the dashboard's pages (default 1,000,000; quick 100,000)")
	flag.IntVar(&o.opsRequests, "ops-requests", 0, "scenario 14: requests per page (default 200; quick 30)")
	flag.StringVar(&o.out, "out", "RESULTS.md", "file the markdown report is written to ('' for none)")
	flag.StringVar(&o.profileDir, "profile", "", "directory for CPU profiles of the venturi worker processes (scenario 4)")
	var libs string
	flag.StringVar(&libs, "libs", "", "comma-separated libraries to run: venturi,venturi-sql,river,river-tuned,graphile,graphile-tuned (default all; for profiling)")
	var workerArgs string
	flag.StringVar(&workerArgs, "worker-args", "", "extra space-separated flags for `bench worker` (profiling: -trace, -concurrency N)")
	flag.IntVar(&o.e2eJobs, "e2e-jobs", 0, "override the number of jobs of scenario 4")
	flag.BoolVar(&o.sameKind, "backlog-same-kind", true, "scenario 6 also measures claim throughput with a backlog of the worked kind")
	var sustainDur time.Duration
	flag.DurationVar(&sustainDur, "sustained-dur", 0, "override the producer run per library of scenario 8 (full 10m, quick 1m)")
	flag.Float64Var(&o.sustainRate, "sustained-rate", 0, "scenario 8: offered jobs/s, half of them delayed (default: the lower of 10,000 (quick 2,000) and 80% of the slowest library's calibrated drain rate)")
	flag.StringVar(&o.sustainCSV, "sustained-csv", "sustained-samples.csv", "scenario 8: file the raw samples are written to ('' for none)")
	flag.StringVar(&o.sustainPNG, "sustained-png", "sustained.png", "scenario 8: file the plot is written to ('' for none)")
	flag.IntVar(&o.historyRuns, "history-runs", 0, "scenario 9: runs of the single job (default 100,000; quick 5,000)")
	flag.IntVar(&o.historyParallelRuns, "history-parallel-runs", 0, "scenario 9: runs of each job of the parallel case (default 10,000; quick 5,000)")
	flag.IntVar(&o.historyJobs, "history-jobs", 100, "scenario 9: jobs of the parallel case")
	flag.IntVar(&o.flowSlotLimit, "flow-slot-limit", 2, "scenario 11: the slots' Limit (1,000 keys)")
	flag.IntVar(&flowKindConcurrency, "flow-kind-limit", flowKindConcurrency, "scenario 11: the kind and queue concurrency limits")
	flag.IntVar(&flowRateN, "flow-rate", flowRateN, "scenario 11: the rate limit, starts per second in each of 100 partitions")
	var flowOthers, flowVariantsFlag string
	flag.StringVar(&flowOthers, "flow-others", "9,99", "scenario 11: comma-separated numbers of other keys in the fairness runs ('' for no fairness runs)")
	flag.StringVar(&flowVariantsFlag, "flow-variants", "", "scenario 11: comma-separated throughput variants to run: plain,slots,slots-unbound,kind-limit,queue-limit,partitions,rate (default all; '-' for none)")
	flag.IntVar(&o.handoffNodes, "handoff-nodes", 0, "scenario 20: links of the workflow chain (default 1,000; quick 200)")
	flag.IntVar(&o.faninMembers, "fanin-members", 0, "scenario 21: members of the fan-in (default 10,000; quick 1,000); spawned at most 10,000")
	var faninVariants string
	flag.StringVar(&faninVariants, "fanin-variants", "", "scenario 21: comma-separated workflow variants beside the plain reference: group,spawn,batch (default all)")
	flag.IntVar(&o.chunkJobs, "chunk-jobs", 0, "scenario 22: jobs per run (default 20,000; quick 2,000)")
	flag.IntVar(&o.chunkSize, "chunk-size", venturi.DefaultChunkSize, "scenario 22: the chunked kind's ChunkConfig.Size")
	flag.IntVar(&o.backdrop, "backdrop", 0, "scenarios 4 and 11: also make venturi's runs over this many blocked workflow jobs, e.g. 1000000 (0: none)")
	flag.IntVar(&o.backdropNodes, "backdrop-nodes", 1000, "the backdrop's nodes per workflow (at most 9,999)")
	flag.StringVar(&o.backdropKind, "backdrop-kind", backdropBlocked, "the backdrop's jobs: blocked (workflow members waiting on an open group) or scheduled (the same rows as plain jobs due in a year)")
	flag.BoolVar(&o.statements, "statements", false, "scenario 11: log the statements of each drain by buffers (pg_stat_statements, which must be preloaded; track = all shows those inside functions)")
	flag.Parse()
	if o.url == "" {
		fmt.Fprintln(os.Stderr, "bench: no database: set -db, BENCH_DATABASE_URL or DATABASE_URL (make bench does)")
		os.Exit(2)
	}
	o.sz = fullSizes
	if o.quick {
		o.sz = quickSizes
	}
	o.workerArgs = strings.Fields(workerArgs)
	if o.e2eJobs > 0 {
		o.sz.e2eJobs = o.e2eJobs
	}
	o.sized(&o.historyRuns, 100_000, 5_000)
	o.sized(&o.historyParallelRuns, 10_000, 5_000)
	o.sized(&o.opsJobs, 1_000_000, 100_000)
	o.sized(&o.opsRequests, 200, 30)
	o.sized(&o.handoffNodes, 1_000, 200)
	o.sized(&o.faninMembers, 10_000, 1_000)
	o.sized(&o.chunkJobs, 20_000, 2_000)
	if o.handoffNodes < 2+handoffWarm || o.handoffNodes > venturi.MaxWorkflowNodes {
		fmt.Fprintf(os.Stderr, "bench: -handoff-nodes must be %d to %d\n", 2+handoffWarm, venturi.MaxWorkflowNodes)
		os.Exit(2)
	}
	if o.backdropKind != backdropBlocked && o.backdropKind != backdropScheduled {
		fmt.Fprintf(os.Stderr, "bench: -backdrop-kind is %s or %s, not %q\n", backdropBlocked, backdropScheduled, o.backdropKind)
		os.Exit(2)
	}
	if o.chunkSize < 1 || o.backdrop < 0 || o.backdropNodes < 1 || o.backdropNodes >= venturi.MaxWorkflowNodes {
		fmt.Fprintf(os.Stderr, "bench: -chunk-size must be positive, -backdrop not negative, -backdrop-nodes 1 to %d\n", venturi.MaxWorkflowNodes-1)
		os.Exit(2)
	}
	if faninVariants != "" {
		o.faninVariants = map[string]bool{}
		for _, v := range strings.Split(faninVariants, ",") {
			v = strings.TrimSpace(v)
			if v != fanInGrouped && v != fanInSpawned && v != fanInBatched {
				fmt.Fprintf(os.Stderr, "bench: -fanin-variants: %q is none of %s, %s, %s\n", v, fanInGrouped, fanInSpawned, fanInBatched)
				os.Exit(2)
			}
			o.faninVariants[v] = true
		}
	}
	if (o.faninVariants == nil || o.faninVariants[fanInSpawned]) && o.faninMembers > venturi.MaxWorkflowNodes {
		fmt.Fprintf(os.Stderr, "bench: a run spawns at most %d nodes: -fanin-members %d needs -fanin-variants group\n", venturi.MaxWorkflowNodes, o.faninMembers)
		os.Exit(2)
	}
	if min(o.historyRuns, o.historyParallelRuns) < 1_000+2*historyWindow {
		fmt.Fprintf(os.Stderr, "bench: -history-runs and -history-parallel-runs must be at least %d\n", 1_000+2*historyWindow)
		os.Exit(2)
	}
	if flowVariantsFlag != "" {
		o.flowVariants = map[string]bool{}
		for _, v := range strings.Split(flowVariantsFlag, ",") {
			o.flowVariants[strings.TrimSpace(v)] = true
		}
	}
	for _, f := range strings.FieldsFunc(flowOthers, func(r rune) bool { return r == ',' }) {
		var k int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &k); err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "bench: -flow-others: %q is not a positive number\n", f)
			os.Exit(2)
		}
		o.flowOthers = append(o.flowOthers, k)
	}
	if o.flowSlotLimit < 1 || flowKindConcurrency < 1 || flowRateN < 1 {
		fmt.Fprintln(os.Stderr, "bench: -flow-slot-limit, -flow-kind-limit and -flow-rate must be positive")
		os.Exit(2)
	}
	if sustainDur > 0 {
		o.sz.sustain.dur = sustainDur
	}
	if libs != "" {
		o.libs = map[string]bool{}
		for _, s := range strings.Split(libs, ",") {
			o.libs[strings.TrimSpace(s)] = true
		}
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func defaultURL() string {
	if u := os.Getenv("BENCH_DATABASE_URL"); u != "" {
		return u
	}
	return os.Getenv("DATABASE_URL")
}

// sized gives a size flag left at 0 its default: full, or quick with -quick.
func (o *options) sized(v *int, full, quick int) {
	if *v <= 0 {
		*v = full
		if o.quick {
			*v = quick
		}
	}
}

func (o *options) want(s string) bool { return o.only == nil || o.only[s] }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func run(ctx context.Context, o options) error {
	started := time.Now()
	if err := setupSchemas(ctx, o.url); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	admin, err := pgxpool.New(ctx, o.url)
	if err != nil {
		return err
	}
	defer admin.Close()
	gw, err := setupGraphile(ctx, o, admin)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	env, err := describe(ctx, admin, o)
	if err != nil {
		return err
	}
	rep := &report{}
	if gw != nil {
		env.lines = append(env.lines, gw.describe())
		if gw.skip != "" {
			rep.skipGraphile(gw.skip)
		}
	}
	b := &bencher{o: o, admin: admin, rep: rep, graphile: gw}
	if o.backdrop > 0 {
		b.bd = &backdrop{n: o.backdrop, nodes: o.backdropNodes, kind: o.backdropKind}
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"enqueue", b.scenarioEnqueue},
		{"dedup", b.scenarioDedup},
		{"batch", b.scenarioBatch},
		{"e2e", b.scenarioE2E},
		{"pickup", b.scenarioPickup},
		{"backlog", b.scenarioBacklog},
		{"sustained", b.scenarioSustained},
		{"history", b.scenarioHistory},
		{"kinds", b.scenarioKinds},
		{"flow", b.scenarioFlow},
		{"coord", b.scenarioCoord},
		{"events", b.scenarioEvents},
		{"ops", b.scenarioOps},
		{"scaling", b.scenarioScaling},
		{"iobound", b.scenarioIOBound},
		{"pgbouncer", b.scenarioPgBouncer},
		{"app", b.scenarioApp},
		{"growth", b.scenarioGrowth},
		{"handoff", b.scenarioHandoff},
		{"fanin", b.scenarioFanIn},
		{"chunks", b.scenarioChunks},
	}
	for _, s := range steps {
		if !o.want(s.name) {
			continue
		}
		logf("scenario %s", s.name)
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("scenario %s: %w", s.name, err)
		}
	}
	env.duration = time.Since(started)
	md := rep.markdown(env, o)
	fmt.Print(md)
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			return err
		}
		logf("wrote %s", o.out)
	}
	return nil
}

// bencher carries what every scenario needs.
type bencher struct {
	o        options
	admin    *pgxpool.Pool
	rep      *report
	loads    []float64    // 1-minute load averages noted before measured runs (scenario 11)
	graphile *graphileEnv // nil when this run has no graphile-worker rows
	bd       *backdrop    // -backdrop: the blocked workflow jobs of scenarios 4 and 11 (nil: none)
}

// order alternates the libraries' order from one repetition to the next. It leaves out
// those not selected by -libs and graphile-worker when it is not installed.
func (b *bencher) order(rep int, libs ...string) []string {
	var out []string
	for _, l := range libs {
		if (b.o.libs == nil || b.o.libs[l]) && (!isGraphile(l) || b.graphile.ready()) {
			out = append(out, l)
		}
	}
	if rep%2 == 1 {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}
