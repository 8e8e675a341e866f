package main

// The graphile tests that need Linux (graphile-worker's install path and CLOCK_MONOTONIC,
// which mono_linux.go reads): a build constraint instead of a skip.

import (
	"errors"
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
