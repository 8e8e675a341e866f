package main

// graphile-worker (Node) as the third peer of scenarios 4, 5 and 7. The bench installs it
// with npm into bench/.graphile, migrates its schema with its own runner and starts
// graphile/worker.mjs as it starts `bench worker` for venturi and River. See README.md,
// "graphile-worker".

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	graphileSchema  = "graphile_bench"
	graphileVersion = "0.17.3"    // 0.18 needs Node 22.18
	graphileSrcDir  = "graphile"  // committed: worker.mjs, package.json, package-lock.json
	graphileModDir  = ".graphile" // git-ignored: npm ci's node_modules (a dot folder, which go ./... skips)
)

// isGraphile says whether lib is one of graphile-worker's configurations.
func isGraphile(lib string) bool { return lib == libGraphile || lib == libGraphileTuned }

// graphileConfig is worker.mjs's configuration flags: graphile-worker's documented
// defaults (concurrentJobs 1, maxPoolSize 10, pollInterval 2000 ms, no local queue, no
// batched completion), or the batching settings of its performance guide (issue 15):
// concurrency 24, localQueue size 500, completeJobBatchDelay 0, pollInterval 20 ms, the
// pool left at its default 10. worker.mjs requires every flag.
func graphileConfig(tuned bool) []string {
	if tuned {
		return []string{"-concurrency", "24", "-max-pool-size", "10", "-poll-interval", "20",
			"-local-queue-size", "500", "-complete-job-batch-delay", "0"}
	}
	return []string{"-concurrency", "1", "-max-pool-size", "10", "-poll-interval", "2000",
		"-local-queue-size", "-1", "-complete-job-batch-delay", "-1"}
}

// graphileEnv is graphile-worker's installation, or why it does not run.
type graphileEnv struct {
	node        string // the node binary
	script      string // graphile/worker.mjs, absolute
	modules     string // .graphile, absolute: holds node_modules/graphile-worker
	nodeVersion string // `node --version`
	skip        string // why graphile-worker does not run ("" when it does)
}

// ready says whether graphile-worker runs in this bench run.
func (g *graphileEnv) ready() bool { return g != nil && g.skip == "" }

// wantGraphile says whether this run has a scenario and a library filter that include
// graphile-worker.
func (o *options) wantGraphile() bool {
	return (o.want("e2e") || o.want("pickup") || o.want("sustained")) &&
		(o.libs == nil || o.libs[libGraphile] || o.libs[libGraphileTuned])
}

// setupGraphile installs graphile-worker when this run needs it (npm ci into .graphile,
// once) and migrates its schema afresh. Without node or npm, or when the install fails,
// graphile-worker is skipped with the reason, except in CI (CI=true), where the run fails:
// a green run must not have skipped a peer.
func setupGraphile(ctx context.Context, o options, admin *pgxpool.Pool) (*graphileEnv, error) {
	if !o.wantGraphile() {
		return nil, nil
	}
	src, err := filepath.Abs(graphileSrcDir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(src, "worker.mjs")); err != nil {
		return nil, fmt.Errorf("graphile-worker: %w (run the bench from bench/)", err)
	}
	g := &graphileEnv{script: filepath.Join(src, "worker.mjs"), modules: filepath.Join(filepath.Dir(src), graphileModDir)}
	skip, err := graphileSkip(g.install(ctx, src, exec.LookPath), os.Getenv("CI") == "true")
	if err != nil {
		return nil, err
	}
	if skip != "" {
		logf("graphile-worker not run: %s", skip)
		return &graphileEnv{skip: skip}, nil
	}
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+graphileSchema+" CASCADE"); err != nil {
		return nil, err
	}
	cmd := g.command(o.url, "venturi-bench-setup", "migrate")
	cmd.Stdout = os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("graphile-worker migrate: %w", err)
	}
	return g, nil
}

// graphileSkip turns an installation problem into the reason graphile-worker is not run,
// or, in CI, into the run's failure.
func graphileSkip(problem error, ci bool) (string, error) {
	switch {
	case problem == nil:
		return "", nil
	case ci:
		return "", fmt.Errorf("graphile-worker: %w (CI=true: a missing peer fails the run)", problem)
	default:
		return problem.Error(), nil
	}
}

// install finds node and npm and, unless .graphile already holds the locked packages,
// copies package.json and package-lock.json there and runs npm ci.
func (g *graphileEnv) install(ctx context.Context, src string, look func(string) (string, error)) error {
	if runtime.GOOS != "linux" {
		return errors.New("graphile-worker's rows need Linux (CLOCK_MONOTONIC shared with Node, /proc)")
	}
	node, err := look("node")
	if err != nil {
		return errors.New("node not found in PATH")
	}
	npm, err := look("npm")
	if err != nil {
		return errors.New("npm not found in PATH")
	}
	g.node = node
	v, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return fmt.Errorf("node --version: %w", err)
	}
	g.nodeVersion = strings.TrimSpace(string(v))
	if graphileInstalled(src, g.modules) {
		return nil
	}
	logf("installing graphile-worker %s with npm ci into %s (once)", graphileVersion, g.modules)
	if err := os.MkdirAll(g.modules, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(g.modules, f), b, 0o644); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = g.modules
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm ci in %s: %w", g.modules, err)
	}
	if !graphileInstalled(src, g.modules) {
		return fmt.Errorf("npm ci in %s did not install graphile-worker %s", g.modules, graphileVersion)
	}
	return nil
}

// graphileInstalled says whether dir holds graphile-worker graphileVersion installed from
// the committed lock file in src.
func graphileInstalled(src, dir string) bool {
	want, err1 := os.ReadFile(filepath.Join(src, "package-lock.json"))
	got, err2 := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	pkg, err3 := os.ReadFile(filepath.Join(dir, "node_modules", "graphile-worker", "package.json"))
	if err1 != nil || err2 != nil || err3 != nil || !bytes.Equal(want, got) {
		return false
	}
	var p struct {
		Version string `json:"version"`
	}
	return json.Unmarshal(pkg, &p) == nil && p.Version == graphileVersion
}

// describe is the environment line of the report.
func (g *graphileEnv) describe() string {
	if !g.ready() {
		return "graphile-worker: not run (" + g.skip + ")"
	}
	return fmt.Sprintf("graphile-worker %s (npm ci from bench/graphile/package-lock.json into bench/%s) on Node %s, schema %s migrated by its runMigrations",
		graphileVersion, graphileModDir, g.nodeVersion, graphileSchema)
}

// command is worker.mjs with args; the URL goes through the environment, and appName
// marks the connections (PGAPPNAME, which node-postgres reads).
func (g *graphileEnv) command(url, appName string, args ...string) *exec.Cmd {
	cmd := exec.Command(g.node, append([]string{g.script}, args...)...)
	cmd.Dir = g.modules // graphile-worker looks for a config file (cosmiconfig) from here up: there is none
	cmd.Env = append(os.Environ(), "BENCH_DATABASE_URL="+url, "GRAPHILE_BENCH_SCHEMA="+graphileSchema,
		"GRAPHILE_BENCH_MODULES="+g.modules, "PGAPPNAME="+appName)
	cmd.Stderr = os.Stderr
	return cmd
}

// startGraphile starts a worker.mjs worker for lib's configuration working task, and
// returns once it printed its ready line. onStart, when not nil, gets each "start" line
// (scenario 5).
func (g *graphileEnv) start(url, lib, task string, onStart func(seq int, mono int64)) (*workerProc, error) {
	if !g.ready() {
		return nil, errors.New("graphile-worker is not installed")
	}
	cmd := g.command(url, workerAppName, append([]string{"work", "-task", task}, graphileConfig(lib == libGraphileTuned)...)...)
	p, br, err := startProc(cmd, lib)
	if err != nil {
		return nil, err
	}
	p.gw = newGraphileOut()
	go p.gw.read(br, onStart)
	return p, nil
}

// graphileOut follows a worker.mjs worker's stdout after its ready line.
type graphileOut struct {
	listening chan struct{} // closed at the "listening" line
	eof       chan struct{} // closed when stdout ends
	runs      atomic.Int64  // from the "done" line; -1 before it
	samples   chan string   // the "sample" lines (bench_sustain), one per request on stdin
	bad       atomic.Value  // the first line not understood (string)
}

func newGraphileOut() *graphileOut {
	o := &graphileOut{listening: make(chan struct{}), eof: make(chan struct{}), samples: make(chan string, 1)}
	o.runs.Store(-1)
	return o
}

func (o *graphileOut) read(r io.Reader, onStart func(seq int, mono int64)) {
	defer close(o.eof)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		o.line(sc.Text(), onStart)
	}
}

// line handles one line: "listening", "start <seq> <mono ns>" or "done <runs>".
func (o *graphileOut) line(l string, onStart func(seq int, mono int64)) {
	f := strings.Fields(l)
	ok := false
	switch {
	case len(f) == 1 && f[0] == "listening":
		select {
		case <-o.listening:
		default:
			close(o.listening)
		}
		ok = true
	case len(f) == 3 && f[0] == "start":
		seq, err1 := strconv.Atoi(f[1])
		mono, err2 := strconv.ParseInt(f[2], 10, 64)
		if ok = err1 == nil && err2 == nil; ok && onStart != nil {
			onStart(seq, mono)
		}
	case len(f) == 6 && f[0] == "sample":
		select {
		case o.samples <- l:
			ok = true
		default: // a reply nobody asked for
		}
	case len(f) == 2 && f[0] == "done":
		n, err := strconv.ParseInt(f[1], 10, 64)
		if ok = err == nil; ok {
			o.runs.Store(n)
		}
	}
	if !ok {
		o.bad.CompareAndSwap(nil, l)
	}
}

// err reports a line the bench did not understand.
func (o *graphileOut) err() error {
	if l, _ := o.bad.Load().(string); l != "" {
		return fmt.Errorf("graphile worker: unexpected output %q", l)
	}
	return nil
}

// awaitListening waits until the worker's LISTEN connection is up.
func (o *graphileOut) awaitListening(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-o.listening:
		return nil
	case <-o.eof:
		return errors.New("graphile worker exited before listening")
	case <-t.C:
		return fmt.Errorf("graphile worker not listening after %v", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resetGraphile empties graphile-worker's job table, when it is in this run.
func (b *bencher) resetGraphile(ctx context.Context) error {
	if !b.graphile.ready() {
		return nil
	}
	_, err := b.admin.Exec(ctx, "TRUNCATE "+graphileSchema+"._private_jobs")
	return err
}

// enqueueGraphile enqueues n no-op jobs ({"n": i}) with graphile-worker's SQL API,
// add_jobs, 1,000 per call, untimed.
func (b *bencher) enqueueGraphile(ctx context.Context, kind string, n int) error {
	q := "SELECT count(*) FROM " + graphileSchema + ".add_jobs(ARRAY(SELECT ROW($1::text, json_build_object('n', i), " +
		"NULL, NULL, NULL, NULL, NULL, NULL)::" + graphileSchema + ".job_spec FROM generate_series($2::int, $3::int) i))"
	for i := 0; i < n; i += 1000 {
		m := min(1000, n-i)
		var got int
		if err := b.admin.QueryRow(ctx, q, kind, i, i+m-1).Scan(&got); err != nil {
			return fmt.Errorf("graphile add_jobs: %w", err)
		}
		if got != m {
			return fmt.Errorf("graphile add_jobs: %d of %d jobs added", got, m)
		}
	}
	return nil
}

// graphilePending counts graphile-worker's jobs of kind still in its table: a completed
// job is deleted, so none left means every one completed. A job that failed stays (to be
// retried); the count reports it as an error rather than waiting for it.
func graphilePending(ctx context.Context, admin *pgxpool.Pool, kind string) (int64, error) {
	var left, failed int64
	err := admin.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE j.last_error IS NOT NULL) FROM "+graphileSchema+"._private_jobs j"+
		" JOIN "+graphileSchema+"._private_tasks t ON t.id = j.task_id WHERE $1 = '' OR t.identifier = $1", kind).Scan(&left, &failed)
	if err == nil && failed > 0 {
		err = fmt.Errorf("graphile-worker: %d jobs failed", failed)
	}
	return left, err
}

// graphilePickupRun is pickupRun for graphile-worker: the producer is the bench process
// (graphile-worker's SQL API, add_job, one autocommit statement per job, every 20 ms) and
// the worker a worker.mjs process; both read CLOCK_MONOTONIC (monoNow, process.hrtime), so
// the handler's start lands on the producer's timeline.
func (b *bencher) graphilePickupRun(ctx context.Context, lib string, rec *pickupRec, n int) error {
	pool, err := poolFor(ctx, b.o.url, graphileSchema, producerPoolConns)
	if err != nil {
		return err
	}
	defer pool.Close()
	p, err := b.graphile.start(b.o.url, lib, kindPickup, rec.startMono)
	if err != nil {
		return err
	}
	defer func() {
		if p != nil {
			p.kill()
		}
	}()
	if err := p.gw.awaitListening(ctx, 30*time.Second); err != nil {
		return err
	}
	add := "SELECT " + graphileSchema + ".add_job($1, json_build_object('seq', $2::int))"
	if err := pacePickups(ctx, rec, n, func(ctx context.Context, seq int) error {
		if _, err := pool.Exec(ctx, add, kindPickup, seq); err != nil {
			return fmt.Errorf("graphile add_job: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	q := p
	p = nil
	if err := q.stop(); err != nil {
		return fmt.Errorf("worker stop: %w", err)
	}
	return q.gw.err()
}
