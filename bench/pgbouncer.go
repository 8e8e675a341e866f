package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenario 17 ("pgbouncer", issue 15): venturi through PgBouncer in transaction pooling
// mode, against the same drain made directly against PostgreSQL. See README.md, scenario 17.
//
// N no-op jobs (100,000; quick 10,000; -e2e-jobs overrides) are enqueued directly (batches
// of 1,000, untimed, then ANALYZE and CHECKPOINT), then one `bench worker` process drains
// them as in scenario 4, in one of four variants, alternated every repetition:
//
//   - pgbouncer: through PgBouncer (scripts/pgbouncer.sh: pool_mode = transaction), with
//     venturi.Config{PollOnly: true} (no LISTEN through a transaction pooler) and pgx's
//     default_query_exec_mode=exec (the unnamed statement, parameter types from the Go
//     values, one round trip: no named prepared statements, which a transaction pooler
//     would send to whichever server connection it lends next; PgBouncer tracks them
//     only from 1.21, with max_prepared_statements, on by default from 1.24, and
//     Debian 12's package is 1.18), as the chaos suite's PgBouncer worker does;
//   - direct-exec: directly, poll-only and exec: the same client, without the pooler;
//   - direct-poll: directly, poll-only, pgx's default mode (cache_statement);
//   - direct: directly, venturi.Config{} (LISTEN/NOTIFY), pgx's default mode.
//
// Everything else venturi does works in transaction mode: its locks are transaction
// scoped (pg_advisory_xact_lock), its session bound is SET LOCAL in the BEGIN, and the
// search_path comes from PgBouncer's connect_query (PgBouncer drops the worker's startup
// parameter).
//
// PgBouncer is an instance of the bench's own (VENTURI_PGB_NAME=bench-<database>), in
// front of the scripts/pg.sh cluster named by VENTURI_PGDATA, mapping database
// venturi_bench to the bench's database (VENTURI_PGB_DBNAME) with search_path
// venturi_bench; it is restarted before every run, so that its server connections are
// made during the run as a direct worker's are, and stopped at the end of the scenario
// (its directory, $VENTURI_PGDATA.pgbouncer-bench-<database>, removed).
// When it cannot run (no pg.sh cluster, the bench database elsewhere, no binary), its
// column says "not run" with the reason, and with CI=true the scenario fails.
//
// Reported: jobs/s from the worker's start until no job is unfinished (polled as in
// scenario 4), the worker's CPU, the PostgreSQL backends' CPU (pids of this database's
// connections named venturi-bench-worker: PgBouncer sets the client's application_name on
// the server connection it lends, so its server connections are counted too; CPU is taken
// per pid as a difference from before the worker started) and PgBouncer's own CPU, per
// 1,000 jobs; every run checks that each job completed exactly once (runs = 1).

const (
	pgbVariantPgBouncer  = "pgbouncer"
	pgbVariantDirectExec = "direct-exec"
	pgbVariantDirectPoll = "direct-poll"
	pgbVariantDirect     = "direct"
)

// pgbVariants in the order of even repetitions (odd ones reverse it).
var pgbVariants = []string{pgbVariantPgBouncer, pgbVariantDirectExec, pgbVariantDirectPoll, pgbVariantDirect}

var pgbVariantLabel = map[string]string{
	pgbVariantPgBouncer:  "PgBouncer (poll-only, exec)",
	pgbVariantDirectExec: "direct (poll-only, exec)",
	pgbVariantDirectPoll: "direct (poll-only)",
	pgbVariantDirect:     "direct (default)",
}

// pgbSchema is PgBouncer's database name and the search_path of its server connections.
const pgbSchema = venturiSchema

// pgbReport is the scenario's table.
type pgbReport struct {
	n      int
	skip   string // why the PgBouncer variant did not run ("" when it did)
	tput   map[string][]float64
	cpuW   map[string][]float64 // worker CPU ms per 1k jobs
	cpuD   map[string][]float64 // PostgreSQL backend CPU ms per 1k jobs
	cpuB   map[string][]float64 // PgBouncer CPU ms per 1k jobs (the pgbouncer variant)
	ratios map[string][]float64 // per repetition: PgBouncer jobs/s over the variant's
	noCPU  []string             // why some CPU was not measured
	checks int                  // runs whose jobs were all completed exactly once
}

func newPgbReport(n int) *pgbReport {
	return &pgbReport{n: n, tput: map[string][]float64{}, cpuW: map[string][]float64{}, cpuD: map[string][]float64{},
		cpuB: map[string][]float64{}, ratios: map[string][]float64{}}
}

func (b *bencher) scenarioPgBouncer(ctx context.Context) error {
	n := 100_000
	if b.o.quick {
		n = 10_000
	}
	if b.o.e2eJobs > 0 {
		n = b.o.e2eJobs
	}
	rep := newPgbReport(n)
	pgb, skip, err := startPgBouncer(ctx, b.o.url, os.Getenv("CI") == "true")
	if err != nil {
		return err
	}
	if pgb != nil {
		defer pgb.stop()
	}
	rep.skip = skip
	if skip != "" {
		logf("  pgbouncer: the PgBouncer variant is not run: %s", skip)
	}
	for r := range b.o.reps {
		variants := append([]string(nil), pgbVariants...)
		if r%2 == 1 {
			for i, j := 0, len(variants)-1; i < j; i, j = i+1, j-1 {
				variants[i], variants[j] = variants[j], variants[i]
			}
		}
		jps := map[string]float64{}
		for _, v := range variants {
			if v == pgbVariantPgBouncer && pgb == nil {
				continue
			}
			res, err := b.pgbRun(ctx, v, pgb, n)
			if err != nil {
				return fmt.Errorf("%s: %w", v, err)
			}
			rep.checks++
			jps[v] = float64(n) / res.elapsed.Seconds()
			rep.tput[v] = append(rep.tput[v], jps[v])
			msg := fmt.Sprintf("  pgbouncer %s rep %d: %.0f jobs/s (%v)", v, r, jps[v], res.elapsed.Round(time.Millisecond))
			perK := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) * 1000 / float64(n) }
			if res.workerOK {
				rep.cpuW[v] = append(rep.cpuW[v], perK(res.worker))
				msg += fmt.Sprintf(", CPU worker %v", res.worker.Round(time.Millisecond))
			}
			if res.dbOK {
				rep.cpuD[v] = append(rep.cpuD[v], perK(res.db))
				msg += fmt.Sprintf(", PostgreSQL backends %v", res.db.Round(time.Millisecond))
			} else {
				rep.noteNoCPU(fmt.Sprintf("%s: no PostgreSQL backend CPU (%s)", pgbVariantLabel[v], res.dbWhy))
			}
			if v == pgbVariantPgBouncer {
				if res.bouncerOK {
					rep.cpuB[v] = append(rep.cpuB[v], perK(res.bouncer))
					msg += fmt.Sprintf(", PgBouncer %v", res.bouncer.Round(time.Millisecond))
				} else {
					rep.noteNoCPU("no PgBouncer CPU (its pid or /proc entry was not found)")
				}
			}
			logf("%s", msg)
		}
		if p, ok := jps[pgbVariantPgBouncer]; ok {
			for v, d := range jps {
				if v != pgbVariantPgBouncer && d > 0 {
					rep.ratios[v] = append(rep.ratios[v], p/d)
				}
			}
		}
	}
	var sb strings.Builder
	rep.markdown(&sb)
	logf("pgbouncer scenario:\n%s", sb.String())
	b.rep.pgb = rep
	return nil
}

func (r *pgbReport) noteNoCPU(s string) {
	for _, x := range r.noCPU {
		if x == s {
			return
		}
	}
	r.noCPU = append(r.noCPU, s)
}

// pgbResult is one drain.
type pgbResult struct {
	elapsed             time.Duration
	worker, db, bouncer time.Duration
	workerOK, bouncerOK bool
	dbOK                bool
	dbWhy               string // why db is unknown
}

// pgbRun enqueues n no-op jobs directly and has one worker process drain them in variant v.
func (b *bencher) pgbRun(ctx context.Context, v string, pgb *pgbInstance, n int) (pgbResult, error) {
	var res pgbResult
	if err := resetJobs(ctx, b.admin); err != nil {
		return res, err
	}
	if err := b.enqueueBulk(ctx, libVenturi, n); err != nil {
		return res, err
	}
	if err := b.settle(ctx, libVenturi); err != nil {
		return res, err
	}
	dsn := b.o.url
	args := append([]string(nil), b.o.workerArgs...)
	if v != pgbVariantDirect {
		args = append(args, "-poll-only")
	}
	switch v {
	case pgbVariantPgBouncer:
		// A fresh PgBouncer: no server connection left from the previous run.
		if err := pgb.restart(ctx); err != nil {
			return res, err
		}
		dsn = pgb.url
		fallthrough
	case pgbVariantDirectExec:
		var err error
		if dsn, err = pgbWithExecMode(dsn, "exec"); err != nil {
			return res, err
		}
	}
	base, baseErr := b.pgbBackendCPUs(ctx)
	var b0 time.Duration
	if pgb != nil && v == pgbVariantPgBouncer {
		b0, res.bouncerOK = pgb.cpu()
	}
	p, err := startWorkerProc(ctx, dsn, libVenturi, "", args...)
	if err != nil {
		return res, err
	}
	defer func() {
		if p != nil {
			p.kill()
		}
	}()
	done := b.allDone(libVenturi, kindNoop, n)
	deadline := time.Now().Add(15 * time.Minute)
	for {
		ok, wait, err := done(ctx)
		if err != nil {
			return res, err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return res, errors.New("jobs not completed in time")
		}
		time.Sleep(wait)
	}
	end := time.Now()
	if w, ok := procCPU(p.cmd.Process.Pid); ok {
		res.worker, res.workerOK = w-p.cpu0, true
	}
	now, err := b.pgbBackendCPUs(ctx)
	switch {
	case baseErr != nil:
		res.dbWhy = baseErr.Error()
	case err != nil:
		res.dbWhy = err.Error()
	case len(now) == 0:
		res.dbWhy = "no connection of this database named " + workerAppName + " in pg_stat_activity, or no /proc entry for it: is the server on another machine?"
	default:
		for pid, c := range now {
			res.db += c - base[pid]
		}
		res.dbOK = true
	}
	if res.bouncerOK {
		b1, ok := pgb.cpu()
		res.bouncer, res.bouncerOK = b1-b0, ok
	}
	q := p
	p = nil
	if err := q.stop(); err != nil {
		return res, fmt.Errorf("worker stop: %w", err)
	}
	res.elapsed = end.Sub(q.t0)
	return res, b.pgbCheckOnce(ctx, n)
}

// pgbCheckOnce checks that every job of the no-op kind completed and ran exactly once.
func (b *bencher) pgbCheckOnce(ctx context.Context, n int) error {
	var total, completed, once, maxRuns int64
	err := b.admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'completed'),
		count(*) FILTER (WHERE state = 'completed' AND runs = 1), coalesce(max(runs), 0)
		FROM `+finishedTable(libVenturi)+` WHERE kind = $1`, kindNoop).Scan(&total, &completed, &once, &maxRuns)
	if err != nil {
		return err
	}
	if total != int64(n) || completed != int64(n) || once != int64(n) {
		return fmt.Errorf("%d jobs enqueued, %d rows, %d completed, %d completed with runs = 1 (most runs of a job: %d)",
			n, total, completed, once, maxRuns)
	}
	return nil
}

// pgbBackendCPUs reads the CPU time of every server process of this database whose
// connection is named workerAppName, by pid. Unlike dbCPU it leaves out other databases
// (other benches on the cluster name their workers alike) and keeps the pids, so that a
// run's share is a difference per process: PgBouncer's server connections may have
// served before.
func (b *bencher) pgbBackendCPUs(ctx context.Context) (map[int]time.Duration, error) {
	rows, err := b.admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()", workerAppName)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		if c, ok := procCPU(int(pid)); ok {
			out[int(pid)] = c
		}
	}
	return out, nil
}

// pgbWithExecMode sets pgx's default_query_exec_mode in a connection string (URL or
// keyword/value).
func pgbWithExecMode(dsn, mode string) (string, error) {
	if !strings.Contains(dsn, "://") {
		return dsn + " default_query_exec_mode=" + mode, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("cannot parse the database URL")
	}
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// pgbInstance is the bench's PgBouncer instance (scripts/pgbouncer.sh).
type pgbInstance struct {
	sh  string   // scripts/pgbouncer.sh
	env []string // VENTURI_PGDATA, VENTURI_PGB_NAME, VENTURI_PGB_DBNAME
	dir string   // its directory (pid file)
	url string   // database pgbSchema through it
}

// startPgBouncer starts PgBouncer in front of the bench's database. When it cannot, it
// returns the reason, or with ci an error.
func startPgBouncer(ctx context.Context, dsn string, ci bool) (*pgbInstance, string, error) {
	p, err := newPgBouncer(dsn)
	if err == nil {
		_ = p.run(ctx, "stop") // an instance a killed bench left behind
		var out string
		if out, err = p.output(ctx, 3*time.Minute, "start", pgbSchema); err == nil { // may install the package
			p.url = strings.TrimSpace(out)
			logf("  pgbouncer: PgBouncer (transaction pooling) at %s", pgbRedact(p.url))
			return p, "", nil
		}
		p.stop()
	}
	if ci {
		return nil, "", fmt.Errorf("PgBouncer: %w (CI=true: the scenario must not skip it)", err)
	}
	return nil, err.Error(), nil
}

// newPgBouncer checks that the bench's database is on the scripts/pg.sh cluster named by
// VENTURI_PGDATA, which scripts/pgbouncer.sh puts PgBouncer in front of, and finds the
// script.
func newPgBouncer(dsn string) (*pgbInstance, error) {
	pgdata := os.Getenv("VENTURI_PGDATA")
	if pgdata == "" {
		return nil, errors.New("VENTURI_PGDATA is not set: PgBouncer is put in front of a cluster of scripts/pg.sh (run under `scripts/pg.sh with`, as make bench does)")
	}
	pb, err := os.ReadFile(filepath.Join(pgdata, "venturi.port"))
	if err != nil {
		return nil, fmt.Errorf("VENTURI_PGDATA=%s is not a running cluster of scripts/pg.sh (%v)", pgdata, err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(pb)))
	if err != nil {
		return nil, fmt.Errorf("%s/venturi.port: %v", pgdata, err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("bench database URL: %v", err)
	}
	loopback := cfg.Host == "127.0.0.1" || cfg.Host == "localhost" || cfg.Host == "::1"
	if !loopback || int(cfg.Port) != port {
		return nil, fmt.Errorf("the bench database (%s:%d) is not the scripts/pg.sh cluster of VENTURI_PGDATA (127.0.0.1:%d), which PgBouncer would front", cfg.Host, cfg.Port, port)
	}
	db := cfg.Database
	if db == "" || strings.Trim(db, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
		return nil, fmt.Errorf("the bench database name %q is not a plain identifier (scripts/pgbouncer.sh)", db)
	}
	sh, err := pgbFindScript("pgbouncer.sh")
	if err != nil {
		return nil, err
	}
	name := "bench-" + db // an instance per bench database: concurrent benches on one cluster
	return &pgbInstance{
		sh:  sh,
		env: append(os.Environ(), "VENTURI_PGDATA="+pgdata, "VENTURI_PGB_NAME="+name, "VENTURI_PGB_DBNAME="+db),
		dir: pgdata + ".pgbouncer-" + name,
	}, nil
}

// pgbFindScript looks for scripts/<name> in the working directory and up to five above it.
func pgbFindScript(name string) (string, error) {
	dir, _ := os.Getwd()
	for range 6 {
		p := filepath.Join(dir, "scripts", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		dir = filepath.Dir(dir)
	}
	return "", fmt.Errorf("scripts/%s not found above the working directory (run the bench from bench/)", name)
}

func (p *pgbInstance) output(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, p.sh, args...)
	cmd.Env = p.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 { // apt-get's output, when it installed the package
			msg = "…" + msg[len(msg)-2000:]
		}
		return "", fmt.Errorf("scripts/pgbouncer.sh %s: %v: %s", strings.Join(args, " "), err, msg)
	}
	return string(out), nil
}

func (p *pgbInstance) run(ctx context.Context, args ...string) error {
	_, err := p.output(ctx, 30*time.Second, args...)
	return err
}

func (p *pgbInstance) restart(ctx context.Context) error { return p.run(ctx, "restart") }

// stop stops PgBouncer and removes its directory (configuration, auth file, log).
func (p *pgbInstance) stop() {
	if err := p.run(context.Background(), "stop"); err != nil {
		logf("  pgbouncer: %v", err)
		return
	}
	if err := os.RemoveAll(p.dir); err != nil {
		logf("  pgbouncer: %v", err)
	}
}

// cpu is PgBouncer's CPU time (its pid file; /proc).
func (p *pgbInstance) cpu() (time.Duration, bool) {
	b, err := os.ReadFile(filepath.Join(p.dir, "pgbouncer.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	return procCPU(pid)
}

func pgbRedact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return "(URL)"
}

func (r *pgbReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 17: PgBouncer (transaction pooling), end-to-end, %d jobs, 1 worker process\n\n", r.n)
	cols := []string{pgbVariantPgBouncer, pgbVariantDirectExec, pgbVariantDirectPoll, pgbVariantDirect}
	fmt.Fprintf(b, "| Metric |")
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", pgbVariantLabel[c])
	}
	for _, c := range cols[1:] {
		fmt.Fprintf(b, " PgBouncer ÷ %s |", pgbVariantLabel[c])
	}
	fmt.Fprintf(b, "\n|---|")
	for range 2*len(cols) - 1 {
		fmt.Fprintf(b, "---|")
	}
	fmt.Fprintln(b)
	row := func(metric string, m map[string][]float64, ratios func(c string) string) {
		fmt.Fprintf(b, "| %s |", metric)
		for _, c := range cols {
			s := cell(m[c])
			if c == pgbVariantPgBouncer && r.skip != "" {
				s = "not run"
			}
			fmt.Fprintf(b, " %s |", s)
		}
		for _, c := range cols[1:] {
			fmt.Fprintf(b, " %s |", ratios(c))
		}
		fmt.Fprintln(b)
	}
	medianRatio := func(m map[string][]float64) func(c string) string {
		return func(c string) string {
			p, d := median(m[pgbVariantPgBouncer]), median(m[c])
			if len(m[pgbVariantPgBouncer]) == 0 || len(m[c]) == 0 || d == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f×", p/d)
		}
	}
	row("jobs/s (durably completed)", r.tput, func(c string) string {
		v := r.ratios[c]
		if len(v) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f× (%s)", median(v), pgbRange(v))
	})
	row("worker CPU ms per 1k jobs", r.cpuW, medianRatio(r.cpuW))
	row("PostgreSQL backend CPU ms per 1k jobs", r.cpuD, medianRatio(r.cpuD))
	row("PgBouncer CPU ms per 1k jobs", r.cpuB, func(string) string { return "–" })
	total := map[string][]float64{}
	for _, c := range cols {
		w, d, bb := r.cpuW[c], r.cpuD[c], r.cpuB[c]
		if len(w) == 0 || len(w) != len(d) || (c == pgbVariantPgBouncer && len(bb) != len(w)) {
			continue
		}
		for i := range w {
			t := w[i] + d[i]
			if c == pgbVariantPgBouncer {
				t += bb[i]
			}
			total[c] = append(total[c], t)
		}
	}
	row("total CPU ms per 1k jobs", total, medianRatio(total))
	fmt.Fprintln(b)
	if r.skip != "" {
		fmt.Fprintf(b, "- **PgBouncer not run**: %s.\n", r.skip)
	}
	fmt.Fprintf(b, "- Every job of every run (%d runs) completed exactly once (`runs = 1`).\n", r.checks)
	fmt.Fprintf(b, "- Jobs enqueued directly, then one `bench worker` process drains them; jobs/s from its start until none is unfinished. "+
		"PgBouncer: `pool_mode = transaction` (scripts/pgbouncer.sh), restarted before each of its runs; the worker runs `venturi.Config{PollOnly: true}` "+
		"with pgx's `default_query_exec_mode=exec` (no named prepared statements). \"poll-only\" is `PollOnly: true`, \"default\" `venturi.Config{}` (LISTEN/NOTIFY); "+
		"without \"exec\", pgx's default mode (`cache_statement`). The variants alternate, their order reversed every repetition; "+
		"the jobs/s ratios are the median (min–max) of the per-repetition ratios, the CPU ratios ratios of medians.\n")
	fmt.Fprintf(b, "- Backend CPU: the server processes of this database whose connection is named `%s`, per pid from before the worker started; "+
		"through PgBouncer they are its server connections, which carry the worker's application_name (PgBouncer sets it on the connection it lends). "+
		"Total CPU adds worker, backends and (PgBouncer column) PgBouncer.\n", workerAppName)
	for _, s := range r.noCPU {
		fmt.Fprintf(b, "- %s.\n", s)
	}
}

// pgbRange is "min–max" of v.
func pgbRange(v []float64) string {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}
