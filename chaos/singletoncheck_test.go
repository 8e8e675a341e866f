package main

import (
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// TestSingletonViolations feeds the singleton checker histories: runs back to back (one
// ending as the next starts), across two jobs, pass; an overlap (a takeover while the old
// run still ran), a run nested inside a long one, and a run number that ends twice fail.
func TestSingletonViolations(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	run := func(job string, n int, ev venturi.Event, worker string, from, to float64) singletonRun {
		return singletonRun{job: job, entry: venturi.JournalEntry{Event: ev, Run: n, Worker: worker, StartedAt: at(from), At: at(to)}}
	}
	ok := []singletonRun{
		run("a", 1, venturi.EventCompleted, "w1", 0, 1),
		run("a", 2, venturi.EventAbandoned, "w1", 1.1, 4),   // killed; rescued at 4
		run("a", 3, venturi.EventPaused, "w2", 4, 5),        // took over as the rescue ended
		run("b", 1, venturi.EventCompleted, "w3", 5.2, 6),   // a second job after the first died
		run("a", 4, venturi.EventCompleted, "w2", 6.5, 6.5), // empty
	}
	if v := singletonViolations(ok); len(v) != 0 {
		t.Fatalf("a valid history: %v", v)
	}
	cases := []struct {
		name string
		runs []singletonRun
		want string
	}{
		{"takeover before the rescue", []singletonRun{
			run("a", 1, venturi.EventAbandoned, "w1", 0, 3),
			run("a", 2, venturi.EventCompleted, "w2", 2.5, 4),
		}, "singleton runs overlap: job a run 1 (w1"},
		{"nested in a long run", []singletonRun{
			run("a", 1, venturi.EventCompleted, "w1", 0, 10),
			run("b", 1, venturi.EventCompleted, "w2", 2, 3),
			run("a", 2, venturi.EventCompleted, "w3", 5, 6),
		}, "job a run 2"},
		{"a run ends twice", []singletonRun{
			run("a", 1, venturi.EventAbandoned, "w1", 0, 1),
			run("a", 1, venturi.EventCompleted, "w1", 1, 2),
		}, "run 1 ended twice"},
	}
	for _, c := range cases {
		v := singletonViolations(c.runs)
		if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), c.want) {
			t.Errorf("%s: violations %q, want one containing %q", c.name, v, c.want)
		}
	}
}
