package main

import (
	"slices"
	"testing"
)

func TestScalingRepOrder(t *testing.T) {
	in := []int{1, 2, 4}
	if got := scalingRepOrder(0, in); !slices.Equal(got, []int{1, 2, 4}) {
		t.Errorf("rep 0: %v", got)
	}
	if got := scalingRepOrder(1, in); !slices.Equal(got, []int{4, 2, 1}) {
		t.Errorf("rep 1: %v", got)
	}
	if !slices.Equal(in, []int{1, 2, 4}) {
		t.Errorf("input modified: %v", in)
	}
}

func TestScalingOnceViolations(t *testing.T) {
	for _, c := range []struct {
		once scalingOnce
		n    int
		want int64
	}{
		{scalingOnce{rows: 100}, 100, 0},
		{scalingOnce{rows: 100, runsNotOne: 2, journalBad: 2, bad: 2}, 100, 2}, // a job in two categories counts once
		{scalingOnce{rows: 97}, 100, 3},                                        // jobs lost
		{scalingOnce{rows: 101, bad: 1}, 100, 2},                               // a duplicate row, itself bad
	} {
		if got := c.once.violations(c.n); got != c.want {
			t.Errorf("%+v of %d: %d violations, want %d", c.once, c.n, got, c.want)
		}
	}
}

func TestScalingChecks(t *testing.T) {
	x := &row{vals: map[string][]float64{libVenturi: {0, 0, 0}, libRiverTuned: {3}}}
	if ok, known := scalingAllZero(libVenturi)(x); !ok || !known {
		t.Errorf("all zero: %v %v", ok, known)
	}
	x.vals[libVenturi] = append(x.vals[libVenturi], 1) // one run with a job run twice
	if ok, known := scalingAllZero(libVenturi)(x); ok || !known {
		t.Errorf("one violation: %v %v, want a failing row", ok, known)
	}
	if _, known := scalingAllZero(libRiver)(x); known {
		t.Error("no values: known")
	}
	y := &row{vals: map[string][]float64{libVenturi: {0.85, 0.95, 1.1}}}
	if ok, known := scalingMedianAtLeast(libVenturi, 0.9)(y); !ok || !known {
		t.Errorf("median 0.95 ≥ 0.9: %v %v", ok, known)
	}
	if ok, _ := scalingMedianAtLeast(libVenturi, 1.0)(y); ok {
		t.Error("median 0.95 ≥ 1.0")
	}
}

func TestScalingSizes(t *testing.T) {
	b := &bencher{}
	if b.scalingJobs() != 200_000 {
		t.Errorf("full: %d", b.scalingJobs())
	}
	b.o.quick = true
	if b.scalingJobs() != 20_000 {
		t.Errorf("quick: %d", b.scalingJobs())
	}
}
