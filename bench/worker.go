package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/venturi-dev/venturi"
)

// workerMain is the `bench worker` subcommand: one library's worker with its default (or
// River's tuned) configuration working the no-op kind (with -sustained, the kind of
// scenario 8) until SIGTERM or stdin closes. It prints "ready <unix ns>" with the time
// just before Start, and with -sustained answers every "sample" line on stdin with one
// line of latency histograms (sustainRec.take).
func workerMain(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	lib := fs.String("lib", libVenturi, "venturi, river or river-tuned")
	url := fs.String("db", defaultURL(), "database URL")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	memprofile := fs.String("memprofile", "", "write a heap profile (allocations since start) to this file on exit")
	trace := fs.Bool("trace", false, "time every query and batch and print a summary to stderr on exit")
	concurrency := fs.Int("concurrency", 0, "what-if: venturi Config.Concurrency, River's MaxWorkers (0 keeps the default)")
	prefetch := fs.Int("prefetch", 0, "what-if: venturi Config.Prefetch (0 keeps the default)")
	sustained := fs.Bool("sustained", false, "work the kind of scenario 8 instead of the no-op kind and answer each \"sample\" line on stdin with a line of latency histograms")
	kinds := fs.Int("kinds", 0, "scenario 10: work the first N generated kinds instead of the no-op kind")
	flow := fs.String("flow", "", "scenario 11: work a flow-control kind instead of the no-op kind: slot, limit, part, rate or fair")
	fs.IntVar(&flowKindConcurrency, "flow-kind-limit", flowKindConcurrency, "scenario 11: the limited kind's concurrency")
	fs.IntVar(&flowRateN, "flow-rate", flowRateN, "scenario 11: the rate-limited kind's starts per second and partition")
	sleep := fs.Duration("sleep", 0, "the no-op handler sleeps this long (simulated I/O; venturi and River)")
	pollOnly := fs.Bool("poll-only", false, "venturi Config.PollOnly: no LISTEN/NOTIFY (connection poolers in transaction mode)")
	retain := fs.Duration("retain-completed", 0, "venturi Config.RetainCompleted and River's CompletedJobRetentionPeriod (0 keeps the default)")
	retainDead := fs.Duration("retain-dead", 0, "venturi Config.RetainDead (0 keeps the default)")
	historyPartition := fs.Duration("history-partition", 0, "venturi Config.HistoryPartition (0 keeps the default)")
	wf := fs.Bool("wf", false, "scenario 21: work the fan-in's workflow kinds and the no-op kind")
	chunks := fs.String("chunks", "", "scenario 22: work the kind whose handler writes a row: one (one by one) or many (RegisterChunks)")
	chunkSize := fs.Int("chunk-size", venturi.DefaultChunkSize, "scenario 22: ChunkConfig.Size of -chunks many")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *memprofile != "" {
		defer func() {
			if f, err := os.Create(*memprofile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	schema := venturiSchema
	if *lib != libVenturi {
		schema = riverSchema
	}
	pcfg, err := pgxpool.ParseConfig(*url)
	if err != nil {
		return err
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema // otherwise pgxpool defaults
	pcfg.ConnConfig.RuntimeParams["application_name"] = workerAppName
	var tracer *stmtTracer
	if *trace {
		tracer = newStmtTracer()
		pcfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	var rec *sustainRec
	if *sustained {
		if rec, err = newSustainRec(ctx, pool); err != nil {
			return err
		}
	}
	go func() { // answer sample requests; the parent closing our stdin stops us
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "sample" && rec != nil {
				fmt.Println(rec.take())
			}
		}
		stop()
	}()
	var stopFn func(context.Context) error
	var t0 time.Time // when the worker started claiming: set by each library's case
	switch *lib {
	case libVenturi:
		cfg := venturi.Config{Concurrency: *concurrency, Prefetch: *prefetch, RetainCompleted: *retain, PollOnly: *pollOnly,
			RetainDead: *retainDead, HistoryPartition: *historyPartition}
		state := &benchState{sustain: rec, sleep: *sleep}
		if *chunks != "" {
			// The handlers' writes go through a pool of their own (pgxpool's default size),
			// its connections marked as the worker's so that their server CPU is counted.
			hp, err := pgxpool.NewWithConfig(ctx, pcfg.Copy())
			if err != nil {
				return err
			}
			defer hp.Close()
			if err := hp.Ping(ctx); err != nil {
				return err
			}
			state.db = hp
		}
		w, err := venturi.NewWorker(pool, state, cfg)
		if err != nil {
			return err
		}
		switch {
		case *wf:
			registerWorkflowKinds(w)
		case *chunks != "":
			if err := registerChunks(w, *chunks, *chunkSize); err != nil {
				return err
			}
		case *sustained:
			venturi.MustRegister[SustainTask](w)
		case *kinds > 0:
			for _, k := range manyKinds[:min(*kinds, len(manyKinds))] {
				k.register(w)
			}
		case *flow != "":
			if err := registerFlow(w, *flow); err != nil {
				return err
			}
		default:
			venturi.MustRegister[NoopTask](w)
		}
		t0 = time.Now()
		if err := w.Start(ctx); err != nil {
			return err
		}
		stopFn = w.Stop
	case libRiver, libRiverTuned:
		workers := river.NewWorkers()
		switch {
		case *sustained:
			river.AddWorker(workers, &sustainWorker{rec: rec})
		case *kinds > 0:
			for _, k := range manyKinds[:min(*kinds, len(manyKinds))] {
				k.addRiver(workers)
			}
		default:
			river.AddWorker(workers, &noopWorker{sleep: *sleep})
		}
		cfg := riverConfig(*lib == libRiverTuned, workers)
		if *concurrency > 0 { // what-if, as for venturi: the default queue's MaxWorkers
			cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: *concurrency}}
		}
		if *retain > 0 {
			cfg.CompletedJobRetentionPeriod = *retain
		}
		c, err := river.NewClient(riverpgxv5.New(pool), cfg)
		if err != nil {
			return err
		}
		t0 = time.Now()
		if err := c.Start(ctx); err != nil {
			return err
		}
		stopFn = c.Stop
	default:
		return fmt.Errorf("unknown -lib %q", *lib)
	}
	fmt.Printf("ready %d\n", t0.UnixNano())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = stopFn(sctx)
	if tracer != nil {
		tracer.summary(os.Stderr, time.Since(t0))
	}
	return err
}

// workerAppName marks the worker processes' connections, whose server-side CPU time the
// bench reads from /proc when PostgreSQL runs on the same machine.
const workerAppName = "venturi-bench-worker"

// procCPU returns a process's user+system CPU time from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100, true // USER_HZ is 100 on Linux
}

// dbCPU sums the CPU time of the server processes serving the worker's connections.
func (b *bencher) dbCPU(ctx context.Context) (time.Duration, bool) {
	rows, err := b.admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()", workerAppName)
	if err != nil {
		return 0, false
	}
	defer rows.Close()
	var total time.Duration
	any := false
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return 0, false
		}
		if c, ok := procCPU(pid); ok {
			total += c
			any = true
		}
	}
	return total, any && rows.Err() == nil
}

// workerProc is a running `bench worker` child, or a graphile-worker one (worker.mjs).
type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	t0    time.Time
	out   *bufio.Reader // the child's stdout after its ready line (sampled workers; others' is drained)
	gw    *graphileOut  // a graphile-worker child's stdout, followed (nil for the Go workers)
	cpu0  time.Duration // the child's CPU time when it was ready (its start-up: node loads its modules)
}

func startWorkerProc(ctx context.Context, url, lib, cpuprofile string, extra ...string) (*workerProc, error) {
	return launchWorker(url, lib, cpuprofile, true, extra)
}

// startSampledWorker starts a `bench worker -sustained` child whose stdout stays
// readable for sample replies.
func startSampledWorker(url, lib string, extra ...string) (*workerProc, error) {
	return launchWorker(url, lib, "", false, append([]string{"-sustained"}, extra...))
}

// sample asks a sampled worker for its latency histograms since the previous call (a
// graphile-worker child answers on the stdout its graphileOut follows).
func (p *workerProc) sample() (*workerSample, error) {
	if _, err := fmt.Fprintln(p.stdin, "sample"); err != nil {
		return nil, err
	}
	type reply struct {
		line string
		err  error
	}
	ch := make(chan reply, 1)
	go func() {
		if p.gw != nil {
			select {
			case l := <-p.gw.samples:
				ch <- reply{l, nil}
			case <-p.gw.eof:
				ch <- reply{"", io.ErrUnexpectedEOF}
			}
			return
		}
		l, err := p.out.ReadString('\n')
		ch <- reply{l, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("worker sample: %w", r.err)
		}
		return parseWorkerSample(strings.TrimSpace(r.line))
	case <-time.After(10 * time.Second):
		p.kill() // unblocks the read
		return nil, errors.New("worker did not answer a sample request")
	}
}

func launchWorker(url, lib, cpuprofile string, drain bool, extra []string) (*workerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{"worker", "-lib", lib}, extra...)
	if cpuprofile != "" {
		args = append(args, "-cpuprofile", cpuprofile)
	}
	cmd := exec.Command(exe, args...)
	// The URL goes through the environment (the worker's -db default), not the command
	// line, where any user of the machine could read its password (ps).
	cmd.Env = append(os.Environ(), "BENCH_DATABASE_URL="+url)
	cmd.Stderr = os.Stderr
	p, br, err := startProc(cmd, lib)
	if err != nil {
		return nil, err
	}
	if drain {
		go func() { _, _ = io.Copy(io.Discard, br) }()
	} else {
		p.out = br
	}
	return p, nil
}

// startProc starts a worker child and reads its first line, "ready <unix ns>" with the
// time just before the worker started; it returns the child's stdout after that line.
func startProc(cmd *exec.Cmd, lib string) (*workerProc, *bufio.Reader, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	p := &workerProc{cmd: cmd, stdin: stdin}
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	if err != nil {
		p.kill()
		return nil, nil, fmt.Errorf("worker %s did not start: %w", lib, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "ready ")), 10, 64)
	if err != nil {
		p.kill()
		return nil, nil, fmt.Errorf("worker %s: unexpected %q", lib, line)
	}
	p.t0 = time.Unix(0, ns)
	p.cpu0, _ = procCPU(cmd.Process.Pid)
	return p, br, nil
}

// peakRSS reads the child's VmHWM (peak resident set) in MiB.
func (p *workerProc) peakRSS() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			var kb float64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:")), " kB"), &kb)
			return kb / 1024, nil
		}
	}
	return 0, errors.New("no VmHWM")
}

func (p *workerProc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() {
		if p.gw != nil {
			<-p.gw.eof // its last line ("done") is read before Wait closes the pipe
		}
		done <- p.cmd.Wait()
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(40 * time.Second):
		p.kill()
		return errors.New("worker did not stop")
	}
}

func (p *workerProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// enqueueBulk enqueues n no-op jobs through the library's batch API (graphile-worker's
// SQL add_jobs), untimed.
func (b *bencher) enqueueBulk(ctx context.Context, lib string, n int) error {
	return b.enqueueBulkOf(ctx, lib, n, noopTask, noopArgs)
}

// enqueueBulkOf enqueues n jobs made by task (venturi) or args (River) in batches of
// 1,000, untimed.
func (b *bencher) enqueueBulkOf(ctx context.Context, lib string, n int, task func(int) venturi.Task, args func(int) river.JobArgs) error {
	if isGraphile(lib) {
		return b.enqueueGraphile(ctx, kindNoop, n)
	}
	pl := libVenturi
	if lib != libVenturi {
		pl = libRiver
	}
	p, err := b.openProducers(ctx, pl)
	if err != nil {
		return err
	}
	defer p.close()
	for i := 0; i < n; i += 1000 {
		if err := p.enqueueBatchOf(ctx, i, min(1000, n-i), task, args); err != nil {
			return err
		}
	}
	return nil
}

// drainBacklog empties every library's tables, enqueues n no-op jobs of lib (untimed,
// batches of 1,000) and settles, the start of every drain scenario; it returns how long
// the enqueue took.
func (b *bencher) drainBacklog(ctx context.Context, lib string, n int) (time.Duration, error) {
	if err := b.resetAll(ctx); err != nil {
		return 0, err
	}
	t := time.Now()
	if err := b.enqueueBulk(ctx, lib, n); err != nil {
		return 0, err
	}
	enq := time.Since(t)
	return enq, b.settle(ctx, lib)
}

// settle analyzes the job table and checkpoints, so that every run starts with the same
// planner statistics and no dirty buffers from its setup.
func (b *bencher) settle(ctx context.Context, lib string) error {
	_, err := b.admin.Exec(ctx, "ANALYZE "+jobTable(lib)+"; CHECKPOINT")
	return err
}

// workUntil starts a worker process and waits until done reports true, polling the
// database; it returns the elapsed time from the worker's start and its peak RSS.
func (b *bencher) workUntil(ctx context.Context, lib, profile string, done func(ctx context.Context) (bool, time.Duration, error)) (time.Duration, float64, error) {
	el, rss, _, err := b.workUntilCPU(ctx, lib, profile, done)
	return el, rss, err
}

// cpuUse is the CPU time of a worker process since its ready line (what starting the
// process took is left out: loading Node's modules takes hundreds of milliseconds) and of
// the server processes serving it.
type cpuUse struct {
	worker, db time.Duration
	ok         bool
}

func (b *bencher) workUntilCPU(ctx context.Context, lib, profile string, done func(ctx context.Context) (bool, time.Duration, error)) (time.Duration, float64, cpuUse, error) {
	return b.workUntilArgs(ctx, lib, profile, b.o.workerArgs, done)
}

// workUntilArgs is workUntilCPU with the worker's extra flags given.
func (b *bencher) workUntilArgs(ctx context.Context, lib, profile string, args []string, done func(ctx context.Context) (bool, time.Duration, error)) (time.Duration, float64, cpuUse, error) {
	r, err := b.workUntilRun(ctx, lib, profile, args, done)
	return r.elapsed, r.rss, r.cpu, err
}

// workRun is what workUntilRun measured.
type workRun struct {
	elapsed time.Duration // from the worker's start to done
	rss     float64       // the worker's peak RSS, MiB
	cpu     cpuUse
	runs    int64 // graphile-worker: task runs it reported on exit (-1 for the Go workers)
}

// workUntilRun is workUntilArgs for any library, graphile-worker's configurations too
// (which take no extra flags and no profile).
func (b *bencher) workUntilRun(ctx context.Context, lib, profile string, args []string, done func(ctx context.Context) (bool, time.Duration, error)) (workRun, error) {
	var (
		p   *workerProc
		err error
	)
	if isGraphile(lib) {
		task := kindNoop
		if slices.Contains(args, "-sustained") { // scenario 8's calibration: its kind
			task = kindSustain
		}
		p, err = b.graphile.start(b.o.url, lib, task, nil)
	} else {
		p, err = startWorkerProc(ctx, b.o.url, lib, profile, args...)
	}
	if err != nil {
		return workRun{}, err
	}
	el, rss, cpu, err := b.workProc(ctx, p, lib, done)
	r := workRun{elapsed: el, rss: rss, cpu: cpu, runs: -1}
	if err == nil && p.gw != nil {
		r.runs = p.gw.runs.Load()
		err = p.gw.err()
	}
	return r, err
}

// workProc waits until done reports true, polling the database, then stops the worker p.
func (b *bencher) workProc(ctx context.Context, p *workerProc, lib string, done func(ctx context.Context) (bool, time.Duration, error)) (time.Duration, float64, cpuUse, error) {
	var cpu cpuUse
	defer func() {
		if p != nil {
			p.kill()
		}
	}()
	timeout := time.Now().Add(15 * time.Minute)
	var end time.Time
	for {
		ok, wait, err := done(ctx)
		if err != nil {
			return 0, 0, cpu, err
		}
		if ok {
			end = time.Now()
			break
		}
		if time.Now().After(timeout) || ctx.Err() != nil {
			return 0, 0, cpu, fmt.Errorf("%s: jobs not completed in time", lib)
		}
		time.Sleep(wait)
	}
	rss, err := p.peakRSS()
	if err != nil {
		return 0, 0, cpu, err
	}
	w, wok := procCPU(p.cmd.Process.Pid)
	d, dok := b.dbCPU(ctx)
	cpu = cpuUse{worker: w - p.cpu0, db: d, ok: wok && dok}
	q := p
	p = nil
	if err := q.stop(); err != nil {
		return 0, 0, cpu, fmt.Errorf("%s worker stop: %w", lib, err)
	}
	return end.Sub(q.t0), rss, cpu, nil
}

// allDone polls the number of unfinished jobs of kind. Counting a large backlog
// is not free (tens of milliseconds of server CPU, competing with the worker under test),
// so between polls it waits a third of the time the rate since the previous poll says is
// left (at most 200ms), and every 2ms only near the end, where the count is cheap; and
// always at least three times as long as the poll itself took, so that polling never
// takes more than a quarter of a core (a count of 100,000 gated jobs took 270 ms on a
// loaded machine, and polls every 200 ms then held a core).
func (b *bencher) allDone(lib, kind string, n int) func(ctx context.Context) (bool, time.Duration, error) {
	return b.doneWhenNone(n, func(ctx context.Context) (int64, error) { return pendingCount(ctx, b.admin, lib, kind) })
}

// doneWhenNone is allDone with the count of the n jobs left unfinished given (scenario 21
// counts blocked workflow jobs too).
func (b *bencher) doneWhenNone(n int, count func(ctx context.Context) (int64, error)) func(ctx context.Context) (bool, time.Duration, error) {
	var (
		prevAt   time.Time
		prevDone int64 = -1
	)
	return func(ctx context.Context) (bool, time.Duration, error) {
		t0 := time.Now()
		left, err := count(ctx)
		if err != nil {
			return false, 0, err
		}
		took := time.Since(t0)
		if left == 0 {
			return true, 0, nil
		}
		now, finished := time.Now(), int64(n)-left
		wait := 20 * time.Millisecond // the worker has not started yet
		if prevDone >= 0 && finished > prevDone {
			perJob := float64(now.Sub(prevAt)) / float64(finished-prevDone)
			wait = min(max(time.Duration(perJob*float64(left))/3, 2*time.Millisecond), 200*time.Millisecond)
		}
		wait = max(wait, 3*took)
		prevAt, prevDone = now, finished
		return false, wait, nil
	}
}

// steadyArgs are the worker flags of scenario 4's steady-state row: finished jobs kept two
// seconds (venturi: in history partitions of a second; River: its job cleaner deletes
// them), so that retention runs during the drain, as it does in production, where every
// job is also pruned. graphile-worker deletes a job as it completes: its steady state is
// its drain.
var steadyArgs = map[string][]string{
	libVenturi:    {"-retain-completed", "2s", "-retain-dead", "2s", "-history-partition", "1s"},
	libRiverTuned: {"-retain-completed", "2s"},
}

// discardArgs are the worker flags of scenario 4's row of equal work with graphile-worker:
// venturi's completed jobs discarded (venturi.Discard, -1ns), so that the finish deletes
// the job and keeps nothing, as graphile-worker's does. River has no such setting.
var discardArgs = []string{"-retain-completed", "-1ns"}

// scenario 4 (and 7): end-to-end throughput and the worker's peak RSS; the same drain in
// steady state, retention running (steadyArgs); and venturi with its completed jobs
// discarded, graphile-worker's work per job (discardArgs).
func (b *bencher) scenarioE2E(ctx context.Context) error {
	n := b.o.sz.e2eJobs
	name := fmt.Sprintf("4. end-to-end, %d jobs, 1 worker process", n)
	steadyName := fmt.Sprintf("4. end-to-end in steady state: retention of 2s pruning during the drain, %d jobs", n)
	discardName := fmt.Sprintf("4. end-to-end, completed jobs discarded (venturi.Discard: the finish deletes the job, as graphile-worker's does), %d jobs", n)
	rssName := "7. worker peak RSS during 4"
	for rep := range b.o.reps {
		for _, on := range b.backdropPhases(rep) {
			b.backdropWant(on)
			if on { // -backdrop: venturi's run again, over the blocked workflow jobs
				res, err := b.e2eMeasure(ctx, libVenturi, n, "", b.o.workerArgs, true)
				if err != nil {
					return err
				}
				logf("  %s venturi over %d %s backdrop jobs, rep %d: %.0f jobs/s (%v)", name, b.bd.n, b.bd.kind, rep, res.jps, res.elapsed.Round(time.Millisecond))
				b.backdropE2E(n, backdropOn, res)
				continue
			}
			for _, lib := range b.order(rep, libVenturi, libRiverTuned, libGraphileTuned, libRiver, libGraphile) {
				res, err := b.e2eRun(ctx, lib, rep, n, name, rssName, b.o.workerArgs)
				if err != nil {
					return err
				}
				if lib == libVenturi {
					b.backdropE2E(n, backdropOff, res)
				}
				if args, ok := steadyArgs[lib]; ok && b.o.profileDir == "" {
					if _, err := b.e2eRun(ctx, lib, rep, n, steadyName, "", append(slices.Clone(b.o.workerArgs), args...)); err != nil {
						return err
					}
				}
				if lib == libVenturi && b.o.profileDir == "" {
					if _, err := b.e2eRun(ctx, lib, rep, n, discardName, "", append(slices.Clone(b.o.workerArgs), discardArgs...)); err != nil {
						return err
					}
				}
			}
		}
	}
	if err := b.backdropUnload(ctx); err != nil {
		return err
	}
	// graphile-worker's steady state, and its work with nothing kept, is its drain (it
	// keeps no finished job).
	for _, lib := range []string{libGraphileTuned, libGraphile} {
		for _, r := range slices.Clone(b.rep.rows) {
			if r.scenario == name && len(r.vals[lib]) > 0 {
				for _, v := range r.vals[lib] {
					x := b.rep.add(steadyName, r.metric, r.higher, lib, v)
					x.ratioOf, x.ratioTo, x.graphileTo = libVenturi, []string{libRiverTuned}, graphilePeers
					y := b.rep.add(discardName, r.metric, r.higher, lib, v)
					y.ratioOf, y.ratioTo, y.graphileTo = libVenturi, nil, graphilePeers
					if r.metric == "jobs/s (durably completed)" {
						y.target, y.check = "≥ 1.5× graphile tuned", graphileAtLeast(1.5)
					}
				}
			}
		}
	}
	return nil
}

// graphileAtLeast: venturi's median is at least k times graphile-worker tuned's.
func graphileAtLeast(k float64) func(*row) (bool, bool) {
	return func(x *row) (bool, bool) {
		r, ok := x.ratio(libGraphileTuned)
		return r >= k, ok
	}
}

// e2eResult is what one run of scenario 4 measured.
type e2eResult struct {
	jps      float64
	elapsed  time.Duration
	rss      float64 // MiB
	cpu      cpuUse
	walBytes int64
}

// e2eMeasure is one run of scenario 4 for lib: n no-op jobs enqueued first, one worker
// process with args. With a profile name, venturi's worker writes a CPU profile; with
// strict, every job must be counted completed (without: retention may have pruned some
// during the drain, or discarded them all).
func (b *bencher) e2eMeasure(ctx context.Context, lib string, n int, profile string, args []string, strict bool) (e2eResult, error) {
	if _, err := b.drainBacklog(ctx, lib, n); err != nil {
		return e2eResult{}, err
	}
	wal0, err := walLSN(ctx, b.admin)
	if err != nil {
		return e2eResult{}, err
	}
	r, err := b.workUntilRun(ctx, lib, profile, args, b.allDone(lib, kindNoop, n))
	if err != nil {
		return e2eResult{}, err
	}
	walBytes, err := walSince(ctx, b.admin, wal0)
	if err != nil {
		return e2eResult{}, err
	}
	done := r.runs // graphile-worker deletes completed jobs: none left (allDone) and n runs
	if !isGraphile(lib) {
		if done, err = completedCount(ctx, b.admin, lib, kindNoop); err != nil {
			return e2eResult{}, err
		}
	}
	if done != int64(n) && strict {
		return e2eResult{}, fmt.Errorf("%s: %d of %d jobs completed", lib, done, n)
	}
	return e2eResult{jps: float64(n) / r.elapsed.Seconds(), elapsed: r.elapsed, rss: r.rss, cpu: r.cpu, walBytes: walBytes}, nil
}

// e2eRun is one run of scenario 4 (name) for lib, recorded in the report: n no-op jobs
// enqueued first, one worker process with args; rssName "" records no peak RSS row.
func (b *bencher) e2eRun(ctx context.Context, lib string, rep, n int, name, rssName string, args []string) (e2eResult, error) {
	profile := ""
	if b.o.profileDir != "" && lib == libVenturi {
		profile = filepath.Join(b.o.profileDir, fmt.Sprintf("venturi-e2e-%d.pprof", rep))
	}
	res, err := b.e2eMeasure(ctx, lib, n, profile, args, rssName != "") // in steady state, retention may have pruned some
	if err != nil {
		return res, err
	}
	el, rss, cpu, walBytes, jps := res.elapsed, res.rss, res.cpu, res.walBytes, res.jps
	logf("  %s %s rep %d: %.0f jobs/s (%v), peak RSS %.1f MiB", name, lib, rep, jps, el.Round(time.Millisecond), rss)
	x := b.rep.add(name, "jobs/s (durably completed)", true, lib, jps)
	x.ratioOf, x.ratioTo, x.target, x.check = libVenturi, []string{libRiverTuned, libRiver}, e2eTarget, e2eCheck
	// Everything the server logged while the worker drained: claims, finishes, and
	// whatever they set off (autovacuum included); the enqueue is before wal0.
	w := b.rep.add(name, "WAL bytes per job (drain)", false, lib, float64(walBytes)/float64(n))
	w.ratioOf, w.ratioTo, w.graphileTo = libVenturi, []string{libRiverTuned, libRiver}, graphilePeers
	x.graphileTo = graphilePeers
	if rssName != "" {
		y := b.rep.add(rssName, "VmHWM (MiB)", false, lib, rss)
		y.ratioOf, y.ratioTo, y.target, y.check = libVenturi, []string{libRiverTuned, libRiver}, "≤ River's", rssCheck
		y.graphileTo = graphilePeers
	} else {
		x.target, x.check = "", nil
	}
	if cpu.ok {
		logf("  %s %s rep %d: CPU worker %v, PostgreSQL backends %v", name, lib, rep, cpu.worker, cpu.db)
		c1 := b.rep.add(name, "worker CPU ms per 1k jobs", false, lib, float64(cpu.worker.Milliseconds())*1000/float64(n))
		c1.ratioOf, c1.ratioTo, c1.graphileTo = libVenturi, []string{libRiverTuned, libRiver}, graphilePeers
		c2 := b.rep.add(name, "PostgreSQL backend CPU ms per 1k jobs", false, lib, float64(cpu.db.Milliseconds())*1000/float64(n))
		c2.ratioOf, c2.ratioTo, c2.graphileTo = libVenturi, []string{libRiverTuned, libRiver}, graphilePeers
	}
	return res, nil
}

// e2eTarget is issue 15's end-to-end target: at least twice River tuned and, when
// graphile-worker ran (node present), one and a half times graphile-worker tuned.
const e2eTarget = "≥ 2× River tuned and ≥ 1.5× graphile tuned"

// e2eCheck checks e2eTarget. Without River tuned's numbers the row is unknown; without
// graphile-worker's (no node) only River's half is checked.
func e2eCheck(x *row) (bool, bool) {
	r, ok := x.ratio(libRiverTuned)
	if !ok {
		return false, false
	}
	met := r >= 2
	if g, ok := x.ratio(libGraphileTuned); ok {
		met = met && g >= 1.5
	}
	return met, true
}

// rssCheck: venturi's peak RSS is no higher than that of either River configuration.
func rssCheck(x *row) (bool, bool) {
	v := x.vals[libVenturi]
	if len(v) == 0 {
		return false, false
	}
	ok, known := true, false
	for _, to := range x.ratioTo {
		if r, has := x.ratio(to); has {
			known = true
			ok = ok && r <= 1
		}
	}
	return ok, known
}

// ---- scenario 5: pickup latency -----------------------------------------------------------

func (b *bencher) scenarioPickup(ctx context.Context) error {
	name := "5. pickup latency, 1 job / 20ms"
	const warm = 5
	n := warm + int(b.o.sz.pickupDur/(20*time.Millisecond))
	for rep := range b.o.reps {
		for _, lib := range b.order(rep, libVenturi, libRiverTuned, libGraphileTuned, libRiver, libGraphile) {
			if err := b.resetAll(ctx); err != nil {
				return err
			}
			rec := newPickupRec(n)
			var err error
			if isGraphile(lib) {
				err = b.graphilePickupRun(ctx, lib, rec, n)
			} else {
				err = pickupRun(ctx, b.o.url, lib, rec, n)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", lib, err)
			}
			var fromAck, fromCall []time.Duration
			missing := 0
			for i := warm; i < n; i++ {
				s := rec.started[i].Load()
				if s == 0 {
					missing++
					continue
				}
				fromAck = append(fromAck, time.Duration(s-rec.acked[i].Load()))
				fromCall = append(fromCall, time.Duration(s-rec.issued[i].Load()))
			}
			if missing > 0 {
				return fmt.Errorf("%s: %d jobs not picked up", lib, missing)
			}
			logf("  %s %s rep %d: from commit ack p50 %.2fms p99 %.2fms; from enqueue call p50 %.2fms p99 %.2fms",
				name, lib, rep, pct(fromAck, .5), pct(fromAck, .99), pct(fromCall, .5), pct(fromCall, .99))
			for _, m := range []struct {
				metric string
				v      float64
				limit  float64
			}{
				{"p50 commit→handler (ms)", pct(fromAck, .5), 2},
				{"p99 commit→handler (ms)", pct(fromAck, .99), 10},
				{"p50 enqueue call→handler (ms)", pct(fromCall, .5), 0},
				{"p99 enqueue call→handler (ms)", pct(fromCall, .99), 0},
			} {
				x := b.rep.add(name, m.metric, false, lib, m.v)
				x.ratioOf, x.ratioTo, x.graphileTo = libVenturi, []string{libRiverTuned, libRiver}, graphilePeers
				if m.limit > 0 {
					x.target, x.check = fmt.Sprintf("≤ %.0f ms", m.limit), valueAtMost(libVenturi, m.limit)
				}
			}
		}
	}
	b.rep.notes = append(b.rep.notes, "Pickup latency: \"commit→handler\" runs from the moment the enqueue call returned (the commit was acknowledged) to the first line of the handler, both read from one process clock; the commit happens on the server slightly earlier, so this is a lower bound. \"enqueue call→handler\" starts before the enqueue is sent and includes the commit's fsync: an upper bound. Producer and worker run in one process; the first 5 jobs are warm-up. graphile-worker's worker is a Node process (graphile/worker.mjs) and its producer the bench process (graphile-worker's SQL add_job, one autocommit statement per job); both read CLOCK_MONOTONIC, so the same clock still times them.")
	return nil
}

func pickupRun(ctx context.Context, url, lib string, rec *pickupRec, n int) error {
	schema := venturiSchema
	if lib != libVenturi {
		schema = riverSchema
	}
	pool, err := poolFor(ctx, url, schema, producerPoolConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	var (
		enqueue func(ctx context.Context, seq int) error
		stopFn  func(context.Context) error
	)
	if lib == libVenturi {
		q := venturi.NewQueue(pool, venturi.QueueConfig{})
		w, err := venturi.NewWorker(pool, &benchState{pickup: rec}, venturi.Config{})
		if err != nil {
			return err
		}
		venturi.MustRegister[PickupTask](w)
		if err := w.Start(ctx); err != nil {
			return err
		}
		stopFn = w.Stop
		enqueue = func(ctx context.Context, seq int) error {
			_, err := q.Enqueue(ctx, PickupTask{Seq: seq})
			return err
		}
	} else {
		workers := river.NewWorkers()
		river.AddWorker(workers, &pickupWorker{rec: rec})
		c, err := river.NewClient(riverpgxv5.New(pool), riverConfig(lib == libRiverTuned, workers))
		if err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		stopFn = c.Stop
		enqueue = func(ctx context.Context, seq int) error {
			_, err := c.Insert(ctx, PickupArgs{Seq: seq}, nil)
			return err
		}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = stopFn(sctx)
	}()
	time.Sleep(300 * time.Millisecond) // let the worker connect, listen and elect a leader
	return pacePickups(ctx, rec, n, enqueue)
}

// pacePickups is scenario 5's producer, for every library: n enqueues, one every 20 ms,
// each call's issue and acknowledgement recorded in rec; then it waits up to 5 s for the
// handlers to have started.
func pacePickups(ctx context.Context, rec *pickupRec, n int, enqueue func(ctx context.Context, seq int) error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for seq := range n {
		<-tick.C
		rec.issued[seq].Store(rec.now())
		if err := enqueue(ctx, seq); err != nil {
			return err
		}
		rec.acked[seq].Store(rec.now())
	}
	deadline := time.Now().Add(5 * time.Second)
	for rec.handled.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// pgxpool is referenced by helper signatures in other files.
var _ *pgxpool.Pool

// walLSN is the server's current WAL insert position.
func walLSN(ctx context.Context, db *pgxpool.Pool) (string, error) {
	var lsn string
	err := db.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// walSince is how many bytes of WAL the server wrote since the position from.
func walSince(ctx context.Context, db *pgxpool.Pool, from string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, from).Scan(&n)
	return n, err
}
