package main

import (
	"strings"
	"testing"
	"time"
)

// e2eLog is the stderr of a scenario-4 run of venturi, as bench writes it.
const e2eLog = `03:40:01.000 scenario e2e
03:40:05.123   4. end-to-end, 100000 jobs, 1 worker process venturi rep 0: 28554 jobs/s (3.502s), peak RSS 26.9 MiB
03:40:05.124   4. end-to-end, 100000 jobs, 1 worker process venturi rep 0: CPU worker 1.9s, PostgreSQL backends 3.41s
`

func TestParseE2ELogReadsThroughputAndCPU(t *testing.T) {
	r, err := parseE2ELog(e2eLog, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	if r.jps != 28554 || !r.known || !r.cpuKnown || r.workerMs != 19 || r.dbMs != 34.1 {
		t.Fatalf("parseE2ELog = %+v", r)
	}
	r, err = parseE2ELog(strings.Split(e2eLog, "\n")[1], 100_000)
	if err != nil || r.cpuKnown || r.jps != 28554 {
		t.Fatalf("without a CPU line: %+v, %v", r, err)
	}
	if _, err := parseE2ELog("scenario e2e\n", 1); err == nil {
		t.Fatal("a log without a result parsed")
	}
}

func TestWithDatabaseReplacesOnlyTheDatabase(t *testing.T) {
	got, err := withDatabase("postgres://postgres:pw@127.0.0.1:54330/venturi_bench?sslmode=disable", "venturi_bench_old")
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://postgres:pw@127.0.0.1:54330/venturi_bench_old?sslmode=disable"; got != want {
		t.Fatalf("withDatabase = %q, want %q", got, want)
	}
}

func TestCompareMarkdownGivesTheRatioAndTheTarget(t *testing.T) {
	builds := []compareBuild{
		{label: "a5c6915", db: "venturi_bench_old", runs: []compareRun{{jps: 30000, known: true, load: 0.5}, {jps: 28000, known: true}, {jps: 32000, known: true}}},
		{label: "HEAD", db: "venturi_bench", runs: []compareRun{{jps: 29000, known: true, cpuKnown: true, workerMs: 19, dbMs: 34}, {jps: 27000, known: true}, {jps: 30000, known: true}}},
	}
	md := compareMarkdown(builds, 100_000, 0.95, time.Minute, "bench compare -old /tmp/x")
	for _, want := range []string{
		"| a5c6915 | `venturi_bench_old` | 30000 (28000–32000) | — | — |",
		"| HEAD | `venturi_bench` | 29000 (27000–30000) | 19.0 (19.0–19.0) | 34.0 (34.0–34.0) |",
		"| HEAD / a5c6915, jobs/s | 0.97× (per repetition 0.94–0.97, median 0.96) | ≥ 0.95× | yes |",
		"0: a5c6915 30000, HEAD 29000; 1: a5c6915 28000, HEAD 27000",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
