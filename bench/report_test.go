package main

import (
	"slices"
	"testing"
)

func TestRedactArgsHidesTheDatabasePasswordInEveryURLForm(t *testing.T) {
	in := []string{
		"-db", "postgres://postgres:s3cret@127.0.0.1:54329/venturi_bench?sslmode=disable",
		"-db=postgres://postgres:s3cret@127.0.0.1:54329/venturi_bench",
		"-only", "sustained",
		"postgres://postgres@127.0.0.1:54329/x",
	}
	want := []string{
		"-db", "postgres://postgres:xxxxx@127.0.0.1:54329/venturi_bench?sslmode=disable",
		"-db=postgres://postgres:xxxxx@127.0.0.1:54329/venturi_bench",
		"-only", "sustained",
		"postgres://postgres@127.0.0.1:54329/x",
	}
	got := redactArgs(in)
	if !slices.Equal(got, want) {
		t.Fatalf("redactArgs(%q)\n got %q\nwant %q", in, got, want)
	}
	if in[1] != "postgres://postgres:s3cret@127.0.0.1:54329/venturi_bench?sslmode=disable" {
		t.Fatalf("redactArgs changed its input: %q", in[1])
	}
}

func TestE2ECheckNeedsBothPeersWhenGraphileRan(t *testing.T) {
	row := func(vals map[string][]float64) *row {
		return &row{vals: vals, ratioOf: libVenturi, ratioTo: []string{libRiverTuned, libRiver}}
	}
	for _, c := range []struct {
		name    string
		vals    map[string][]float64
		met, ok bool
	}{
		{"no River tuned", map[string][]float64{libVenturi: {30}}, false, false},
		{"River 2x, no graphile", map[string][]float64{libVenturi: {30}, libRiverTuned: {15}}, true, true},
		{"River 1.73x", map[string][]float64{libVenturi: {30}, libRiverTuned: {17.3}}, false, true},
		{"River 2x, graphile 0.97x", map[string][]float64{libVenturi: {30}, libRiverTuned: {15}, libGraphileTuned: {31}}, false, true},
		{"River 2x, graphile 1.5x", map[string][]float64{libVenturi: {30}, libRiverTuned: {15}, libGraphileTuned: {20}}, true, true},
	} {
		met, ok := e2eCheck(row(c.vals))
		if met != c.met || ok != c.ok {
			t.Errorf("%s: e2eCheck = %v, %v; want %v, %v", c.name, met, ok, c.met, c.ok)
		}
	}
}
