package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

func TestPctIsTheNearestRankBelow(t *testing.T) {
	var lats []time.Duration
	for i := 100; i >= 1; i-- { // 1..100 ms, in reverse
		lats = append(lats, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {.5, 50}, {.99, 99}, {1, 100}} {
		if got := pct(lats, c.p); got != c.want {
			t.Errorf("pct(1..100 ms, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := pct(nil, .5); got != 0 {
		t.Errorf("pct(nil) = %v", got)
	}
	if lats[0] != 100*time.Millisecond {
		t.Fatal("pct sorted its input")
	}
}

func TestHandoffLatenciesMeasureEachLinkFromItsUpstreamsFinish(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	// Link i finishes at 10i ms; link i>0 is released 1 ms and claimed 3 ms after its
	// upstream's finish, and its handler starts 4 ms after it (unknown for link 2).
	var links []chainLink
	for i := range 4 {
		l := chainLink{seq: i, finished: at(10 * float64(i))}
		if i > 0 {
			up := 10 * float64(i-1)
			l.released, l.claimed = at(up+1), at(up+3)
			if i != 2 {
				l.startedUs = at(up + 4).UnixMicro()
			}
		}
		links = append(links, l)
	}
	slices.Reverse(links) // any order
	h, err := handoffLatencies(links, 0)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(d ...time.Duration) []float64 {
		var out []float64
		for _, x := range d {
			out = append(out, float64(x)/1e6)
		}
		return out
	}
	for _, c := range []struct {
		name      string
		got, want []float64
	}{
		{"release", ms(h.release...), []float64{1, 1, 1}},
		{"claim", ms(h.claim...), []float64{3, 3, 3}},
		{"release→claim", ms(h.releaseToClaim...), []float64{2, 2, 2}},
		{"handler", ms(h.handler...), []float64{4, 4}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if h.hop != 10*time.Millisecond {
		t.Errorf("hop %v, want 10ms", h.hop)
	}
	if w, err := handoffLatencies(links, 2); err != nil || len(w.claim) != 1 {
		t.Errorf("2 warm links: %d latencies (%v), want 1", len(w.claim), err)
	}
	if _, err := handoffLatencies(slices.Delete(slices.Clone(links), 1, 2), 0); err == nil {
		t.Error("a missing link: no error")
	}
}

func TestFanInSplitKeepsEveryEnqueueWithinTheNodeLimit(t *testing.T) {
	for _, c := range []struct {
		n, max, first int
		rest          []int
	}{
		{1000, 10_000, 1000, nil},
		{9997, 10_000, 9997, nil},
		{10_000, 10_000, 9997, []int{3}},
		{25_000, 10_000, 9997, []int{10_000, 5003}},
		{1000, 400, 397, []int{400, 203}},
	} {
		first, rest := fanInSplit(c.n, c.max)
		if first != c.first || !slices.Equal(rest, c.rest) {
			t.Errorf("fanInSplit(%d, %d) = %d, %v; want %d, %v", c.n, c.max, first, rest, c.first, c.rest)
		}
		sum := first
		for _, k := range rest {
			sum += k
			if k > c.max {
				t.Errorf("fanInSplit(%d, %d): an AddToWorkflow of %d nodes", c.n, c.max, k)
			}
		}
		if sum != c.n || first+3 > c.max {
			t.Errorf("fanInSplit(%d, %d): %d members, first enqueue %d nodes", c.n, c.max, sum, first+3)
		}
	}
}

func TestFanTimesMeasure(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ms := func(v float64) time.Time { return t0.Add(time.Duration(v * float64(time.Millisecond))) }
	plain := fanTimes{firstReleased: ms(0), firstClaimed: ms(0), lastFinished: ms(500), members: 1000}
	if m := plain.measure(); m.workflow || m.dbRate != 2000 {
		t.Errorf("plain: %+v, want 2000/s and no workflow times", m)
	}
	wf := fanTimes{rootFinished: ms(0), firstReleased: ms(2), firstClaimed: ms(5), lastFinished: ms(1005), members: 1000,
		faninReleased: ms(1006), faninClaimed: ms(1012)}
	m := wf.measure()
	want := fanMeasured{dbRate: 1000, rootToRelease: 2, rootToClaim: 5, lastToRelease: 1, lastToClaim: 7, commitToClaim: -1, workflow: true, root: true}
	if m != want {
		t.Errorf("workflow: %+v, want %+v", m, want)
	}
	wf.lastCommitted = ms(1009) // the server records commit times
	want.commitToClaim = 3
	if m := wf.measure(); m != want {
		t.Errorf("workflow with its commit time: %+v, want %+v", m, want)
	}
	batch := fanTimes{firstReleased: ms(0), firstClaimed: ms(0), lastFinished: ms(1000), members: 1000,
		faninReleased: ms(1001), faninClaimed: ms(1004)} // no root
	if m := batch.measure(); !m.workflow || m.root || m.lastToClaim != 4 {
		t.Errorf("batch: %+v, want the fan-in's times and no root's", m)
	}
	if m := (fanTimes{}).measure(); m != (fanMeasured{commitToClaim: -1}) {
		t.Errorf("empty: %+v", m)
	}
}

func TestBackdropSizesAndPhases(t *testing.T) {
	for _, c := range []struct {
		n, per int
		want   []int
	}{
		{20_000, 1000, slices.Repeat([]int{1000}, 20)},
		{2500, 1000, []int{1000, 1000, 500}},
		{0, 1000, nil},
	} {
		if got := backdropSizes(c.n, c.per); !slices.Equal(got, c.want) {
			t.Errorf("backdropSizes(%d, %d) = %v, want %v", c.n, c.per, got, c.want)
		}
	}
	b := &bencher{}
	if got := b.backdropPhases(1); !slices.Equal(got, []bool{false}) {
		t.Errorf("no backdrop: %v", got)
	}
	b.bd = &backdrop{n: 10, nodes: 5}
	// Without first in even repetitions: off on | on off | off on ... loads the rows about
	// once per two repetitions.
	if got := b.backdropPhases(0); !slices.Equal(got, []bool{false, true}) {
		t.Errorf("rep 0: %v", got)
	}
	if got := b.backdropPhases(1); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("rep 1: %v", got)
	}
	b.o.libs = map[string]bool{libRiverTuned: true}
	if got := b.backdropPhases(0); !slices.Equal(got, []bool{false}) {
		t.Errorf("-libs without venturi: %v", got)
	}
}

func TestVariantTableMarkdown(t *testing.T) {
	tb := newVariantTable("one", "two", "three")
	tb.base = "one"
	for _, v := range []float64{100, 200} {
		tb.add("jobs/s", "one", v)
		tb.add("jobs/s", "two", 2*v)
	}
	tb.add("calls", "one", 10)
	var b strings.Builder
	tb.markdown(&b, map[string]string{"two": "Two"})
	want := "| Metric | one | Two | three | Two / one | three / one |\n" +
		"|---|---|---|---|---|---|\n" +
		"| jobs/s | 150 (100–200) | 300 (200–400) | — | 2.00× (per repetition 2.00–2.00, median 2.00) | — |\n" +
		"| calls | 10.0 (10.0–10.0) | — | — | — | — |\n"
	if got := b.String(); got != want {
		t.Errorf("markdown:\n%s\nwant:\n%s", got, want)
	}
	if got := tb.get("jobs/s", "two"); !slices.Equal(got, []float64{200, 400}) {
		t.Errorf("get: %v", got)
	}

	single := newVariantTable("venturi")
	single.add("p50 (ms)", "venturi", 3)
	b.Reset()
	single.markdown(&b, nil)
	if got := b.String(); got != "| Metric | venturi |\n|---|---|\n| p50 (ms) | 3.00 (3.00–3.00) |\n" {
		t.Errorf("without a base:\n%s", got)
	}
}

func TestReportSectionsSayHowTheyMeasured(t *testing.T) {
	var b strings.Builder
	(&faninReport{n: venturi.MaxWorkflowNodes, t: newVariantTable(fanInPlain, fanInGrouped)}).markdown(&b)
	for _, s := range []string{"Scenario 21", fmt.Sprintf("%d members are one `EnqueueWorkflow`", venturi.MaxWorkflowNodes-3), "1 `AddToWorkflow` call(s)", "`SealGroup`"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("fan-in section of MaxWorkflowNodes members lacks %q", s)
		}
	}
	b.Reset()
	(&faninReport{n: 1000, t: newVariantTable(fanInPlain)}).markdown(&b)
	if strings.Contains(b.String(), "AddToWorkflow") {
		t.Error("fan-in section of 1,000 members mentions AddToWorkflow")
	}

	b.Reset()
	h := &handoffReport{n: 200, t: newVariantTable("venturi"), offsets: []clockOffset{{offsetUs: 3, rttUs: 20}}}
	h.t.add("p50 upstream finish → downstream claim (ms)", "venturi", 3.1)
	h.markdown(&b)
	for _, s := range []string{"Scenario 20", "chain of 200", "| p50 upstream finish → downstream claim (ms) | 3.10 (3.10–3.10) |", "µs: 3.00 (3.00–3.00)", "µs: 10.0 (10.0–10.0)"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("handoff section lacks %q:\n%s", s, b.String())
		}
	}

	b.Reset()
	r := newBackdropReport(2500, 1000, backdropBlocked)
	r.t.add("4. end-to-end: jobs/s", backdropOff, 100)
	r.t.add("4. end-to-end: jobs/s", backdropOn, 90)
	r.loads = []string{"made by the engine in 1.2s"}
	r.markdown(&b)
	for _, s := range []string{"2500 blocked workflow jobs", "3 workflows of up to 1000 nodes", "| with 2500 blocked / without |", "0.90×", "Loads: made by the engine in 1.2s."} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("backdrop section lacks %q:\n%s", s, b.String())
		}
	}

	b.Reset()
	c := &chunksReport{n: 2000, size: 100, t: newVariantTable(chunkOneByOne, chunkChunked)}
	c.t.base = chunkOneByOne
	c.markdown(&b)
	for _, s := range []string{"Scenario 22", "2000 jobs", "`Size: 100`", "| Metric | one-by-one | chunks | chunks / one-by-one |"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("chunks section lacks %q:\n%s", s, b.String())
		}
	}
}
