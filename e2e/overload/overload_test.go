package main

import (
	"context"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"0", 0, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{"", 0, false},
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true}, // in the past: retry now
	} {
		got, ok := parseRetryAfter(c.in, now)
		if got != c.want || ok != c.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestRSSBounded(t *testing.T) {
	const mib = 1024
	for _, c := range []struct {
		name          string
		xs            []int64
		half          int
		ok, checked   bool
		wantP1, wantP int64
	}{
		{"flat", []int64{20 * mib, 21 * mib, 21 * mib, 20 * mib}, 2, true, true, 21 * mib, 21 * mib},
		{"within the slack", []int64{40 * mib, 40*mib + 26*mib}, 1, true, true, 40 * mib, 66 * mib},
		{"growing", []int64{40 * mib, 40*mib + 27*mib}, 1, false, true, 40 * mib, 67 * mib},
		{"no second half", []int64{40 * mib}, 1, true, false, 0, 0},
		{"no first half", []int64{40 * mib}, 0, true, false, 0, 0},
	} {
		p1, p2, ok, checked := rssBounded(c.xs, c.half)
		if ok != c.ok || checked != c.checked || p1 != c.wantP1 || p2 != c.wantP {
			t.Errorf("%s: rssBounded = %d, %d, %v, %v; want %d, %d, %v, %v", c.name, p1, p2, ok, checked, c.wantP1, c.wantP, c.ok, c.checked)
		}
	}
}

func TestKeysFor(t *testing.T) {
	// Each steady key is offered at most steadyKeyLoad of its write limit.
	for _, rate := range []float64{0.5, 8, 8.1, 112.2, 240} {
		n := keysFor(rate)
		if rate/float64(n) > steadyKeyLoad*writeRate+1e-9 || (n > 1 && rate/float64(n-1) <= steadyKeyLoad*writeRate) {
			t.Errorf("keysFor(%v) = %d: %.2f/s per key, want the fewest keys at <= %v/s", rate, n, rate/float64(n), steadyKeyLoad*writeRate)
		}
	}
}

func TestPct(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p50, p99 := pct(ds, 50), pct(ds, 99); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond {
		t.Errorf("pct: p50 %v, p99 %v; want 50ms, 99ms", p50, p99)
	}
	if pct(nil, 50) != 0 {
		t.Error("pct of nothing is not 0")
	}
}

func TestPaceDropsWhatNobodyTakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	permits := make(chan struct{}, 5)
	var offered, dropped int64
	pace(ctx, 1000, permits, &offered, &dropped) // nobody takes: returns when ctx ends
	n := 0
	for range permits { // closed by pace
		n++
	}
	// Every permit offered was either buffered or dropped (none blocks the pacer).
	if n > 5 || offered != int64(n)+dropped {
		t.Errorf("pace: %d permits buffered, %d offered, %d dropped; want offered = buffered + dropped", n, offered, dropped)
	}
}
