package main

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// synthRuns makes ten minutes of samples of two libraries, with a failed statistics
// read and an empty latency window among them.
func synthRuns() []*sustainRun {
	var runs []*sustainRun
	for li, lib := range []string{libVenturi, libRiverTuned} {
		r := &sustainRun{lib: lib, rate: 10_000, dur: 10 * time.Minute, every: 10 * time.Second}
		for k := 1; k <= 60; k++ {
			s := &sustainSample{k: k, t: time.Duration(k) * r.every, statsOK: k != 20, enq: &hist{}, due: &hist{}}
			s.sizeBytes = int64(float64(40<<20) * (1 + float64(li)) * math.Min(1, float64(k)/6) * (1 + 0.1*math.Sin(float64(k))))
			s.deadTuples = int64(50_000 + 20_000*math.Sin(float64(k)/3) + float64(li*30_000))
			s.available = int64(10 * k) // up to minute 2 (k 12): at most 120; then 987 at k 13, falling
			if k > 12 {
				s.available = int64(1000 - k)
			}
			if k != 30 {
				for i := range 1000 {
					s.enq.add(int64(2000 + li*3000 + i*k))
					s.due.add(int64(5000 + li*2_000_000 + i*10))
				}
			}
			r.samples = append(r.samples, s)
		}
		runs = append(runs, r)
	}
	return runs
}

func TestPlotSustained(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sustained.png")
	if p := os.Getenv("BENCH_PLOT_OUT"); p != "" {
		path = p // to look at the result
	}
	if err := plotSustained(path, synthRuns()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != plotW || b.Dy() < 4*plotPanelH {
		t.Fatalf("plot is %v", b)
	}
}

func TestSummarizeSustained(t *testing.T) {
	runs := synthRuns()
	m := summarize(runs[0])
	if m.ref != 2*time.Minute || m.sizeRef <= 0 || m.sizeEnd <= 0 || m.sizeMax < m.sizeEnd {
		t.Fatalf("sizes: %+v", m)
	}
	if m.maxAvailStart != 120 || m.maxAvail != 987 {
		t.Fatalf("largest backlog %d up to minute 2, %d in all", m.maxAvailStart, m.maxAvail)
	}
	if m.enqFirst.n != 29_000 || m.enqLast.n != 30_000 {
		t.Fatalf("halves hold %d and %d latencies", m.enqFirst.n, m.enqLast.n)
	}
	if p := m.due.quantile(.99); math.Abs(p-14.9) > 0.3 {
		t.Fatalf("due p99 %g ms", p)
	}
	path := filepath.Join(t.TempDir(), "s.csv")
	if err := writeSustainCSV(path, runs); err != nil {
		t.Fatal(err)
	}
}
