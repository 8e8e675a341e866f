package main

import (
	"slices"
	"strings"
	"testing"
)

func TestRotateGivesEveryElementEveryPosition(t *testing.T) {
	s := []string{"a", "b", "c"}
	want := [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}}
	for k, w := range want {
		if got := rotate(s, k); !slices.Equal(got, w) {
			t.Errorf("rotate(%q, %d) = %q, want %q", s, k, got, w)
		}
	}
	if !slices.Equal(s, []string{"a", "b", "c"}) {
		t.Fatalf("rotate changed its input: %q", s)
	}
	if got := rotate([]int(nil), 3); got != nil {
		t.Fatalf("rotate(nil) = %v", got)
	}
}

func TestFairJobsPutTheFloodFirstAndSpreadTheRest(t *testing.T) {
	const n, others = 1000, 9
	flooded := fairJobs(fairFlooded, n, others)
	if len(flooded) != n {
		t.Fatalf("flooded: %d jobs, want %d", len(flooded), n)
	}
	perKey := map[string]int{}
	for i, j := range flooded {
		if (i < 900) != (j.T == flowFloodKey) {
			t.Fatalf("job %d has key %q: the flood's 900 jobs come first", i, j.T)
		}
		if j.P != j.T {
			t.Fatalf("job %d: partition %q, key %q", i, j.P, j.T)
		}
		perKey[j.T]++
	}
	if len(perKey) != others+1 || perKey[flowFloodKey] != 900 {
		t.Fatalf("keys: %v", perKey)
	}
	for k, c := range perKey {
		if k != flowFloodKey && (c < 100/others || c > 100/others+1) {
			t.Fatalf("key %s has %d jobs; the other 100 are spread evenly: %v", k, c, perKey)
		}
	}
	unflooded := fairJobs(fairUnflooded, n, others)
	if !slices.Equal(unflooded, flooded[900:]) {
		t.Fatalf("the unflooded run's jobs are not the flooded run's other jobs")
	}
	for i, j := range fairJobs(fairFIFO, n, others) {
		if j.P != "" || j.T != flooded[i].T || j.N != flooded[i].N {
			t.Fatalf("FIFO job %d = %+v, want flooded job %+v without a partition", i, j, flooded[i])
		}
	}
}

func TestFlowVariantsFirstIsPlainAndEachHasAKindAndATask(t *testing.T) {
	vs := flowVariants(2)
	if vs[0].name != "plain" || vs[0].target || vs[0].worker != "" {
		t.Fatalf("first variant %+v, want the plain one without a target", vs[0])
	}
	names := map[string]bool{}
	for _, v := range vs {
		if names[v.name] {
			t.Fatalf("variant %s twice", v.name)
		}
		names[v.name] = true
		if got := v.task(7).Kind(); got != v.kind {
			t.Errorf("%s: task kind %q, variant kind %q", v.name, got, v.kind)
		}
	}
	for _, n := range []string{"slots", "kind-limit", "queue-limit", "rate"} {
		if !names[n] {
			t.Errorf("no %s variant", n)
		}
	}
	s := vs[1].task(1234).(FlowSlotTask)
	if s.Key != "key-0234" || s.Limit != 2 {
		t.Fatalf("slot task %+v", s)
	}
}

func TestFlowArgsCarryTheLimitsToTheWorker(t *testing.T) {
	if flowArgs("") != nil {
		t.Fatal("the plain variant's worker gets no flow flags")
	}
	got := strings.Join(flowArgs("rate"), " ")
	want := "-flow rate -flow-kind-limit 2000 -flow-rate 1000"
	if got != want {
		t.Fatalf("flowArgs = %q, want %q", got, want)
	}
}

func TestRatioCellOfGivesTheMedianRatioAndThePairedRange(t *testing.T) {
	s, r, ok := ratioCellOf([]float64{8, 9, 10}, []float64{10, 10, 20})
	if !ok || r != 0.9 || s != "0.90× (per repetition 0.50–0.90, median 0.80)" {
		t.Fatalf("ratioCellOf = %q, %v, %v", s, r, ok)
	}
	if s, _, ok := ratioCellOf(nil, []float64{1}); ok || s != "—" {
		t.Fatalf("no numerator: %q, %v", s, ok)
	}
	if s, _, _ := ratioCellOf([]float64{3}, []float64{2}); s != "1.50×" {
		t.Fatalf("one repetition: %q", s)
	}
}

func TestFlowMarkdownMarksTheTargets(t *testing.T) {
	f := &flowReport{jobs: 100_000, slotLimit: 2, kindLimit: 2000, rateN: 1000,
		tput:      map[string][]float64{"plain": {30000, 28000, 32000}, "slots": {20000, 21000, 19000}, "rate": {15000, 14000, 16000}, "partitions": {10, 10, 10}},
		cpuWorker: map[string][]float64{"plain": {20, 22, 24}, "slots": {30}}, cpuDB: map[string][]float64{"plain": {40}, "slots": {90}},
		fair: map[int]map[string][]float64{
			9:  {fairUnflooded: {400, 420, 410}, fairFlooded: {500, 520, 480}, fairFIFO: {4000, 4100, 3900}},
			99: {fairUnflooded: {400}, fairFlooded: {900}},
		},
		fairP50:     map[int]map[string][]float64{9: {}, 99: {}},
		fairPos:     map[int]map[string][]float64{9: {fairUnflooded: {9899}, fairFlooded: {10998}, fairFIFO: {99899}}},
		floodJPS:    map[int][]float64{},
		othersOrder: []int{9, 99},
		loads:       []float64{0.5, 0.9, 0.7},
	}
	for _, v := range flowVariants(2) {
		f.variants = append(f.variants, flowVariantDesc{name: v.name, label: v.label, target: v.target})
	}
	var b strings.Builder
	f.markdown(&b)
	md := b.String()
	for _, want := range []string{
		"| plain | plain jobs (`NoopTask`, scenario 4's path) | 30000 (28000–32000) | — |  |  |",
		"| slots | `Slot{Key, Limit: 2}` over 1000 keys, jobs round-robin over the keys | 20000 (19000–21000) | 0.67× (per repetition 0.59–0.75, median 0.67) | ≥ 0.7× plain | **no** | 30.0 (30.0–30.0) | 90.0 (90.0–90.0) | 0.52× |",
		"| rate | 100 partitions, kind `Rate{N: 1000, Per: 1s, PerPartition: true}` | 15000 (14000–16000) | 0.50× (per repetition 0.50–0.50, median 0.50) | ≥ 0.7× plain | **no** |",
		"| kind-limit | kind `Limits{Concurrency: 2000}` | — | — | ≥ 0.7× plain | ? | — | — | — |",
		"| partitions | `Partition()` over 100 partitions, no limits (round-robin alone) | 10.0 (10.0–10.0) | 0.00× (per repetition 0.00–0.00, median 0.00) |  |  |",
		"| 9 | 410 (400–420) | 500 (480–520) | 1.22× (per repetition 1.17–1.25, median 1.24) | ≤ 2× | yes |",
		"| 4000 (3900–4100) | 9.76× (per repetition 9.51–10.00, median 9.76) |",
		"| 99 | 400 (400–400) | 900 (900–900) | 2.25× | ≤ 2× | **no** |",
		"median 0.70, 0.50–0.90",
		"| 9 | 9899 (9899–9899) | 10998 (10998–10998) | 1.11× | 99899 (99899–99899) | 10.09× |",
		"the slot limit 2 over 1000 keys allows 2000",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestParseLoadAvg(t *testing.T) {
	if l, ok := parseLoadAvg("0.93 1.20 1.31 3/512 12345\n"); !ok || l != 0.93 {
		t.Fatalf("parseLoadAvg = %v, %v", l, ok)
	}
	if _, ok := parseLoadAvg(""); ok {
		t.Fatal("empty input parsed")
	}
}

func TestQuantileIsTheNearestRankBelow(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {.5, 3}, {.99, 4}, {1, 5}} {
		if got := quantile(v, c.q); got != c.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", v, c.q, got, c.want)
		}
	}
	if !slices.Equal(v, []float64{5, 1, 4, 2, 3}) {
		t.Fatalf("quantile sorted its input: %v", v)
	}
	if quantile(nil, .5) != 0 {
		t.Fatal("quantile of nothing")
	}
}
