package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// flagValues maps worker.mjs's flags (graphileConfig) to their values.
func flagValues(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args)%2 != 0 {
		t.Fatalf("odd flag list %q", args)
	}
	m := map[string]string{}
	for i := 0; i < len(args); i += 2 {
		m[strings.TrimPrefix(args[i], "-")] = args[i+1]
	}
	return m
}

func TestGraphileConfigsAreTheDocumentedDefaultsAndTheIssuesTuning(t *testing.T) {
	want := map[bool]map[string]string{
		false: {"concurrency": "1", "max-pool-size": "10", "poll-interval": "2000", "local-queue-size": "-1", "complete-job-batch-delay": "-1"},
		true:  {"concurrency": "24", "max-pool-size": "10", "poll-interval": "20", "local-queue-size": "500", "complete-job-batch-delay": "0"},
	}
	for tuned, w := range want {
		got := flagValues(t, graphileConfig(tuned))
		if len(got) != len(w) {
			t.Errorf("tuned=%v: flags %v, want %v", tuned, got, w)
		}
		for k, v := range w {
			if got[k] != v {
				t.Errorf("tuned=%v: -%s = %q, want %q", tuned, k, got[k], v)
			}
		}
	}
}

// The script requires exactly the flags the bench passes (and -task), so that a
// configuration never falls back to a default of the script or of graphile-worker.
func TestWorkerScriptRequiresEveryFlagTheBenchPasses(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(graphileSrcDir, "worker.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`flags\(args, \[([^\]]*)\]\)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("worker.mjs: no flags(args, [...]) call")
	}
	var script []string
	for _, q := range regexp.MustCompile(`"([a-z-]+)"`).FindAllSubmatch(m[1], -1) {
		script = append(script, string(q[1]))
	}
	for _, tuned := range []bool{false, true} {
		var bench []string
		for k := range flagValues(t, graphileConfig(tuned)) {
			bench = append(bench, k)
		}
		bench = append(bench, "task")
		slices.Sort(bench)
		s := slices.Sorted(slices.Values(script))
		if !slices.Equal(s, bench) {
			t.Errorf("tuned=%v: worker.mjs requires %v, the bench passes %v", tuned, s, bench)
		}
	}
}

func TestGraphileInstalledWantsTheLockAndTheVersion(t *testing.T) {
	src, dir := t.TempDir(), t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkg := filepath.Join(dir, "node_modules", "graphile-worker", "package.json")
	write(filepath.Join(src, "package-lock.json"), "lock 1")
	if graphileInstalled(src, dir) {
		t.Fatal("installed in an empty folder")
	}
	write(filepath.Join(dir, "package-lock.json"), "lock 1")
	write(pkg, `{"name": "graphile-worker", "version": "`+graphileVersion+`"}`)
	if !graphileInstalled(src, dir) {
		t.Fatal("not installed with the same lock and version")
	}
	write(filepath.Join(src, "package-lock.json"), "lock 2")
	if graphileInstalled(src, dir) {
		t.Error("installed although the committed lock changed")
	}
	write(filepath.Join(src, "package-lock.json"), "lock 1")
	write(pkg, `{"version": "0.18.0"}`)
	if graphileInstalled(src, dir) {
		t.Error("installed with another version")
	}
}

func TestGraphileOutReadsTheWorkersLines(t *testing.T) {
	o := newGraphileOut()
	var starts [][2]int64
	o.read(strings.NewReader("listening\nstart 3 12345\nlistening\nstart 4 12399\ndone 7\n"), func(seq int, mono int64) {
		starts = append(starts, [2]int64{int64(seq), mono})
	})
	select {
	case <-o.listening:
	default:
		t.Error("listening not seen")
	}
	select {
	case <-o.eof:
	default:
		t.Error("eof not closed")
	}
	if !slices.Equal(starts, [][2]int64{{3, 12345}, {4, 12399}}) {
		t.Errorf("starts %v", starts)
	}
	if n := o.runs.Load(); n != 7 {
		t.Errorf("runs %d, want 7", n)
	}
	if err := o.err(); err != nil {
		t.Errorf("err %v", err)
	}
	bad := newGraphileOut()
	bad.read(strings.NewReader("start x 1\nsomething\n"), nil)
	if err := bad.err(); err == nil || !strings.Contains(err.Error(), "start x 1") {
		t.Errorf("bad lines: err %v, want the first one", err)
	}
	if n := bad.runs.Load(); n != -1 {
		t.Errorf("runs %d without a done line, want -1", n)
	}
}

func TestReportShowsGraphileColumnsOnlyWhenItRanOrWasToRun(t *testing.T) {
	env := &environment{}
	newRep := func() (*report, *row) {
		r := &report{}
		x := r.add("4. end-to-end", "jobs/s", true, libVenturi, 100)
		x.ratioOf, x.ratioTo, x.graphileTo = libVenturi, []string{libRiverTuned, libRiver}, graphilePeers
		r.add("4. end-to-end", "jobs/s", true, libRiverTuned, 50)
		return r, x
	}
	r, _ := newRep()
	if md := r.markdown(env, options{}); strings.Contains(md, "graphile tuned |") {
		t.Errorf("graphile columns without graphile:\n%s", md)
	}
	r, _ = newRep()
	r.skipGraphile("node not found in PATH")
	md := r.markdown(env, options{})
	if !strings.Contains(md, "| not run | not run | — |") || !strings.Contains(md, "graphile-worker not run: node not found in PATH.") {
		t.Errorf("skipped graphile not reported:\n%s", md)
	}
	r, _ = newRep()
	r.add("4. end-to-end", "jobs/s", true, libGraphileTuned, 80)
	r.add("4. end-to-end", "jobs/s", true, libGraphile, 20)
	md = r.markdown(env, options{})
	if !strings.Contains(md, "| 1.25× vs tuned; 5.00× vs default |") {
		t.Errorf("venturi/graphile ratios missing:\n%s", md)
	}
}
