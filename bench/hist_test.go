package main

import (
	"math"
	"testing"
)

func TestHistIndexIsMonotonicAndTight(t *testing.T) {
	prev := -1
	for v := int64(0); v < 1<<22; v += 1 + v/97 {
		i := histIndex(v)
		if i < prev || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d after %d", v, i, prev)
		}
		prev = i
		if got := histValue(i); math.Abs(got-float64(v)) > float64(v)/64+0.5 {
			t.Fatalf("histValue(histIndex(%d)) = %g", v, got)
		}
	}
	if i := histIndex(math.MaxInt64); i != histBuckets-1 {
		t.Fatalf("largest value in bucket %d of %d", i, histBuckets)
	}
}

func TestHistQuantileAndWire(t *testing.T) {
	var h hist
	for v := int64(1); v <= 100_000; v++ {
		h.add(v)
	}
	g, err := decodeHist(h.encode())
	if err != nil {
		t.Fatal(err)
	}
	var m hist
	m.merge(g)
	for _, q := range []float64{.5, .99} {
		want := q * 100 // ms
		if got := m.quantile(q); math.Abs(got-want) > want/50 {
			t.Errorf("quantile(%g) = %g ms, want %g", q, got, want)
		}
	}
	if !math.IsNaN((&hist{}).quantile(.5)) {
		t.Error("empty histogram has a quantile")
	}
	ws, err := parseWorkerSample("sample off=-3 rtt=40 neg=0 enq=" + h.encode() + " due=-")
	if err != nil || ws.enq.n != h.n || ws.due.n != 0 || ws.offsetUs != -3 {
		t.Fatalf("parseWorkerSample: %+v, %v", ws, err)
	}
}
