package main

import (
	"errors"
	"flag"
	"slices"
	"testing"
)

func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args      []string
		pos       []string
		limit     int
		usageFail bool
	}{
		{args: []string{"state:dead", "--limit", "5", "kind:x"}, pos: []string{"state:dead", "kind:x"}, limit: 5},
		{args: []string{"--limit=7"}, pos: nil, limit: 7},
		{args: []string{"a", "--", "--limit", "b"}, pos: []string{"a", "--limit", "b"}, limit: 1},
		{args: []string{"a", "--nope"}, usageFail: true},
	} {
		fs := newFlagSet("t")
		limit := fs.Int("limit", 1, "")
		pos, err := parseInterspersed(fs, tt.args)
		var ue *usageError
		if tt.usageFail {
			if !errors.As(err, &ue) {
				t.Errorf("%v: want a usage error, got %v", tt.args, err)
			}
			continue
		}
		if err != nil || !slices.Equal(pos, tt.pos) || *limit != tt.limit {
			t.Errorf("%v: got %q, limit %d, %v; want %q, limit %d", tt.args, pos, *limit, err, tt.pos, tt.limit)
		}
	}
	fs := newFlagSet("t")
	if _, err := parseInterspersed(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestOneValue(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"connection refused":    true,
		"error: timeout":        true,
		"x note:a b":            false,
		"dead kind:fetch_page":  false,
		"":                      true,
		"2025-01-01T00:00:00Z":  true,
		"a 2025-01-01T00:00:00": false,
	} {
		if got := oneValue(v); got != want {
			t.Errorf("oneValue(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestSparkline(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		vals []float64
		n    int
		want string
	}{
		{nil, 5, ""},
		{[]float64{0, 0}, 5, "▁▁"},
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7}, 8, "▁▂▃▄▅▆▇█"},
		{[]float64{9, 0, 7}, 2, "▁█"},
	} {
		if got := sparkline(tt.vals, tt.n); got != tt.want {
			t.Errorf("sparkline(%v, %d) = %q, want %q", tt.vals, tt.n, got, tt.want)
		}
	}
}

func TestCleanCell(t *testing.T) {
	t.Parallel()
	if got := cleanCell("a\tb\nc\x1b[2Jd"); got != "a b c [2Jd" {
		t.Errorf("cleanCell: %q", got)
	}
	if got := cleanCell(""); got != "-" {
		t.Errorf("cleanCell of empty: %q", got)
	}
	if got := clip("héllo wörld", 6); got != "héllo…" {
		t.Errorf("clip: %q", got)
	}
}
