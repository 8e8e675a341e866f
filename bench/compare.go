package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// compareMain is `bench compare`: scenario 4 (end to end, venturi only) of two bench
// binaries, typically one built from a baseline commit and one from this checkout, run
// alternately in one session on one PostgreSQL cluster, each in its own database (each
// binary migrates its own venturi schema there). It writes a markdown table of the
// medians and the ratio new/old.
func compareMain(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ExitOnError)
	oldBin := fs.String("old", "", "bench binary built from the baseline commit (required)")
	newBin := fs.String("new", "", "bench binary of the candidate (default: this binary)")
	oldLabel := fs.String("old-label", "old", "the baseline's name in the report (e.g. its commit)")
	newLabel := fs.String("new-label", "new", "the candidate's name in the report")
	oldDB := fs.String("old-db", "venturi_bench_old", "database of the baseline's runs (created when missing)")
	newDB := fs.String("new-db", "venturi_bench", "database of the candidate's runs (created when missing)")
	base := fs.String("db", defaultURL(), "URL of the cluster (default $BENCH_DATABASE_URL, else $DATABASE_URL); its database name is replaced by -old-db and -new-db")
	reps := fs.Int("reps", 5, "runs of each binary; the order flips every repetition")
	jobs := fs.Int("jobs", 100_000, "jobs of each run (-e2e-jobs)")
	target := fs.Float64("target", 0.95, "the least acceptable new/old throughput ratio")
	out := fs.String("out", "RESULTS-flow-plain.md", "report file ('' for none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *oldBin == "" || *base == "" {
		return errors.New("-old and a database URL (-db, BENCH_DATABASE_URL or DATABASE_URL) are required")
	}
	if *newBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		*newBin = exe
	}
	ctx := context.Background()
	builds := []compareBuild{{label: *oldLabel, bin: *oldBin, db: *oldDB}, {label: *newLabel, bin: *newBin, db: *newDB}}
	for i := range builds {
		u, err := withDatabase(*base, builds[i].db)
		if err != nil {
			return err
		}
		builds[i].url = u
		if err := ensureDatabase(ctx, *base, builds[i].db); err != nil {
			return err
		}
	}
	started := time.Now()
	for rep := range *reps {
		for _, i := range rotate([]int{0, 1}, rep) {
			b := &builds[i]
			r, err := b.run(ctx, *jobs, rep)
			if err != nil {
				return fmt.Errorf("%s, repetition %d: %w", b.label, rep, err)
			}
			b.runs = append(b.runs, r)
			logf("compare: %s rep %d: %.0f jobs/s, worker CPU %.1f ms/1k, backends %.1f ms/1k, load %.2f", b.label, rep, r.jps, r.workerMs, r.dbMs, r.load)
		}
	}
	md := compareMarkdown(builds, *jobs, *target, time.Since(started), strings.Join(append([]string{"bench compare"}, redactArgs(args)...), " "))
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			return err
		}
		logf("wrote %s", *out)
	}
	return nil
}

// compareBuild is one bench binary and its runs.
type compareBuild struct {
	label, bin, db, url string
	runs                []compareRun
}

// compareRun is one scenario-4 run of a build.
type compareRun struct {
	jps             float64
	workerMs, dbMs  float64 // CPU ms per 1,000 jobs; 0 when not read
	load            float64 // 1-minute load average just before the run
	cpuKnown, known bool
}

// run runs the build's scenario 4 once (venturi only) and reads its log.
func (b *compareBuild) run(ctx context.Context, jobs, rep int) (compareRun, error) {
	load, _ := loadAvg1()
	cmd := exec.CommandContext(ctx, b.bin, "-only", "e2e", "-libs", libVenturi, "-reps", "1", "-out=", "-e2e-jobs", fmt.Sprint(jobs))
	// The URL, with its password, goes through the environment, not the command line.
	cmd.Env = append(os.Environ(), "BENCH_DATABASE_URL="+b.url)
	var stderr bytes.Buffer
	cmd.Stderr = io.MultiWriter(&stderr, os.Stderr)
	cmd.Stdout = io.Discard
	if err := cmd.Run(); err != nil {
		return compareRun{}, err
	}
	r, err := parseE2ELog(stderr.String(), jobs)
	r.load = load
	return r, err
}

var (
	e2eJobsRe = regexp.MustCompile(`end-to-end, \d+ jobs, 1 worker process venturi rep \d+: (\d+(?:\.\d+)?) jobs/s`)
	e2eCPURe  = regexp.MustCompile(`end-to-end, \d+ jobs, 1 worker process venturi rep \d+: CPU worker (\S+), PostgreSQL backends (\S+)`)
)

// parseE2ELog reads jobs/s and the CPU per 1,000 jobs from the log of a scenario-4 run of
// venturi (the format has not changed since the baseline commits).
func parseE2ELog(log string, jobs int) (compareRun, error) {
	var r compareRun
	m := e2eJobsRe.FindStringSubmatch(log)
	if m == nil {
		return r, errors.New("no jobs/s line in the run's log")
	}
	if _, err := fmt.Sscan(m[1], &r.jps); err != nil {
		return r, err
	}
	r.known = true
	if c := e2eCPURe.FindStringSubmatch(log); c != nil {
		w, err1 := time.ParseDuration(c[1])
		d, err2 := time.ParseDuration(c[2])
		if err1 == nil && err2 == nil && jobs > 0 {
			r.workerMs = float64(w.Milliseconds()) * 1000 / float64(jobs)
			r.dbMs = float64(d.Milliseconds()) * 1000 / float64(jobs)
			r.cpuKnown = true
		}
	}
	return r, nil
}

// withDatabase returns u with its database (path) replaced by db.
func withDatabase(u, db string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", errors.New("unparsable database URL")
	}
	p.Path = "/" + db
	p.RawPath = ""
	return p.String(), nil
}

// ensureDatabase creates database db on the cluster of u when it does not exist.
func ensureDatabase(ctx context.Context, u, db string) error {
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	return err
}

// compareMarkdown writes the report of bench compare; builds[0] is the baseline.
func compareMarkdown(builds []compareBuild, jobs int, target float64, took time.Duration, command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Plain path: end to end, %s against %s\n\n", builds[1].label, builds[0].label)
	fmt.Fprintf(&b, "`%s`, run %s, took %s. Scenario 4 (venturi only: %d no-op jobs enqueued first, one worker process with `venturi.Config{}`) "+
		"of each build, alternately (the order flips every repetition), on one PostgreSQL cluster, each build in its own database with its own migrations. "+
		"Cells: median (min–max) over the repetitions.\n\n",
		command, time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second), jobs)
	fmt.Fprintf(&b, "| Build | database | jobs/s | worker CPU ms per 1k jobs | PostgreSQL backend CPU ms per 1k jobs | 1-minute load before the runs |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|\n")
	series := func(runs []compareRun, f func(compareRun) (float64, bool)) []float64 {
		var out []float64
		for _, r := range runs {
			if v, ok := f(r); ok {
				out = append(out, v)
			}
		}
		return out
	}
	jps := func(r compareRun) (float64, bool) { return r.jps, r.known }
	for _, bl := range builds {
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s | %s |\n", bl.label, bl.db, cell(series(bl.runs, jps)),
			cell(series(bl.runs, func(r compareRun) (float64, bool) { return r.workerMs, r.cpuKnown })),
			cell(series(bl.runs, func(r compareRun) (float64, bool) { return r.dbMs, r.cpuKnown })),
			cell(series(bl.runs, func(r compareRun) (float64, bool) { return r.load, true })))
	}
	if len(builds) == 2 {
		newJ, oldJ := series(builds[1].runs, jps), series(builds[0].runs, jps)
		ratio, r, ok := ratioCellOf(newJ, oldJ)
		fmt.Fprintf(&b, "\n| Ratio | ratio of the medians (the per-repetition ratios: range, median) | Target | Met |\n|---|---|---|---|\n")
		fmt.Fprintf(&b, "| %s / %s, jobs/s | %s | ≥ %.2f× | %s |\n", builds[1].label, builds[0].label, ratio, target, met(r >= target, ok))
		// Per-repetition values, in run order.
		fmt.Fprintf(&b, "\nPer repetition (jobs/s): ")
		var parts []string
		for i := range max(len(builds[0].runs), len(builds[1].runs)) {
			var p []string
			for _, bl := range builds {
				if i < len(bl.runs) {
					p = append(p, fmt.Sprintf("%s %.0f", bl.label, bl.runs[i].jps))
				}
			}
			parts = append(parts, fmt.Sprintf("%d: %s", i, strings.Join(p, ", ")))
		}
		fmt.Fprintf(&b, "%s.\n", strings.Join(parts, "; "))
	}
	return b.String()
}
