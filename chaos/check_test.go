package main

import (
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

func TestAttribute(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	faults := []faultRow{
		{kind: "sigkill", at: at(10), until: at(10), pid: 100},
		{kind: "sigstop", at: at(20), until: at(26), pid: 200},
		{kind: "pg-restart-immediate", at: at(40), until: at(47)},
		{kind: "terminate-burst", at: at(60), until: at(61)},
		{kind: "listen-kill", at: at(70), until: at(70)},
	}
	run := func(pid int, from, to float64) venturi.JournalEntry {
		return venturi.JournalEntry{Event: venturi.EventAbandoned, Worker: "chaos-worker-1-pid" + itoa(pid),
			StartedAt: at(from), At: at(to)}
	}
	cases := []struct {
		name string
		en   venturi.JournalEntry
		want int
	}{
		{"kill of the process that ran it", run(100, 9, 12), 0},
		{"kill of another process", run(101, 9, 12), -1},
		{"kill before the run started", run(100, 11, 13), -1},
		{"stop overlapping the run", run(200, 19, 28), 1},
		{"stop of another process", run(100, 19, 28), -1},
		{"restart overlapping the run", run(300, 38, 49), 2},
		{"run claimed just after the restart", run(300, 48, 51), 2},
		{"burst during the run", run(300, 59.5, 60.2), 3},
		{"a listen kill explains nothing", run(300, 69, 72), -1},
		{"no fault", run(300, 80, 82), -1},
	}
	for _, c := range cases {
		if got := attribute(c.en, faults, 2*time.Second); got != c.want {
			t.Errorf("%s: attribute = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestPidOf(t *testing.T) {
	for in, want := range map[string]int{"chaos-worker-2-pid12735": 12735, "host-1-abc": 0, "": 0} {
		if got := pidOf(in); got != want {
			t.Errorf("pidOf(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPct(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[int]time.Duration{50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond} {
		if got := pct(d, p); got != want {
			t.Errorf("pct(%d) = %v, want %v", p, got, want)
		}
	}
	if got := pct(d[:1], 99); got != time.Millisecond {
		t.Errorf("pct of one sample = %v", got)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
