package main

// The graphile tests that need Linux (graphile-worker's install path and CLOCK_MONOTONIC,
// which mono_linux.go reads): a build constraint instead of a skip.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAMissingNodeSkipsGraphileExceptInCI(t *testing.T) {
	noNode := func(name string) (string, error) {
		if name == "node" {
			return "", errors.New("not found")
		}
		return "/usr/bin/" + name, nil
	}
	g := &graphileEnv{modules: t.TempDir()}
	problem := g.install(t.Context(), t.TempDir(), noNode)
	if problem == nil || !strings.Contains(problem.Error(), "node not found") {
		t.Fatalf("install without node: %v", problem)
	}
	if skip, err := graphileSkip(problem, false); err != nil || !strings.Contains(skip, "node not found") {
		t.Errorf("outside CI: skip %q, err %v; want the reason and no error", skip, err)
	}
	if skip, err := graphileSkip(problem, true); err == nil || skip != "" {
		t.Errorf("CI=true: skip %q, err %v; want an error", skip, err)
	}
	if skip, err := graphileSkip(nil, true); err != nil || skip != "" {
		t.Errorf("no problem: skip %q, err %v", skip, err)
	}
}

// A start read on CLOCK_MONOTONIC (as a Node process reports it) lands on the record's
// timeline, between two readings of the bench's own clock.
func TestPickupRecPutsAMonotonicReadingOnItsTimeline(t *testing.T) {
	rec := newPickupRec(1)
	before := rec.now()
	m := monoNow()
	after := rec.now()
	rec.startMono(0, m)
	got := rec.started[0].Load()
	const slack = int64(50 * time.Millisecond) // the base's estimate, preempted on a loaded machine
	if got < before-slack || got > after+slack {
		t.Fatalf("start %d not within [%d, %d] (±%d)", got, before, after, slack)
	}
	if rec.handled.Load() != 1 {
		t.Fatalf("handled %d", rec.handled.Load())
	}
}

// worker.mjs's histogram (scenario 8's recorder in JavaScript) puts every value in the
// bucket bench/hist.go's histIndex does, so that the two workers' samples merge and
// compare bucket for bucket. The function and its constants are read out of worker.mjs
// and run by node (which the bench's graphile-worker runs need anyway).
func TestGraphileHistIndexIsHistIndex(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node: %v (the graphile-worker peer needs it)", err)
	}
	src, err := os.ReadFile(filepath.Join(graphileSrcDir, "worker.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)const HIST_SUB = .*?\nfunction histIndex\(v\) \{.*?\n\}\n`).Find(src)
	if fn == nil {
		t.Fatal("no histIndex in worker.mjs")
	}
	values := []int64{-5, 0, 1, 63, 64, 65, 127, 128, 129, 1000, 4095, 4096, 65535, 1 << 20, 123456789, 1<<32 - 1, 1 << 32, 1<<32 + 12345, 1 << 39, 1<<40 - 1, 1 << 40, 1 << 45}
	strs := make([]string, len(values))
	for i, v := range values {
		strs[i] = strconv.FormatInt(v, 10)
	}
	out, err := exec.Command(node, "-e", string(fn)+"console.log(["+strings.Join(strs, ",")+"].map(histIndex).join(' '))").CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v: %s", err, out)
	}
	got := strings.Fields(string(out))
	if len(got) != len(values) {
		t.Fatalf("node printed %q", out)
	}
	for i, v := range values {
		if want := strconv.Itoa(histIndex(v)); got[i] != want {
			t.Errorf("histIndex(%d): worker.mjs %s, hist.go %s", v, got[i], want)
		}
	}
}
