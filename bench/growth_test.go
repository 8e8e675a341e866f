package main

import (
	"slices"
	"testing"
)

func TestGrowthSizes(t *testing.T) {
	b := &bencher{}
	if got := b.growthSizes(); !slices.Equal(got, []int{10_000, 100_000, 1_000_000}) {
		t.Errorf("full: %v", got)
	}
	b.o.quick = true
	if got := b.growthSizes(); !slices.Equal(got, []int{10_000, 50_000, 100_000}) {
		t.Errorf("quick: %v", got)
	}
}

func TestGrowthRatio(t *testing.T) {
	got := map[int]growthMeasured{100: {jps: 1000}, 1000: {jps: 850}}
	if r, ok := growthRatio(got, 100, 1000); !ok || r != 0.85 {
		t.Errorf("ratio %v %v, want 0.85", r, ok)
	}
	if _, ok := growthRatio(got, 100, 10_000); ok {
		t.Error("missing size: ok")
	}
	if _, ok := growthRatio(map[int]growthMeasured{100: {}, 1000: {jps: 1}}, 100, 1000); ok {
		t.Error("zero denominator: ok")
	}
}
