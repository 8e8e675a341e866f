package main

import (
	"strings"
	"testing"
)

// TestEventViolations feeds the event checker histories: a complete read passes; a
// repeated event, a missed one, one out of order, one invented, a journal the stream
// disagrees with, a missing enqueue or start and events of a job that did not opt in fail.
func TestEventViolations(t *testing.T) {
	ev := func(x uint64, s int64, job, event string, run int) streamEvent {
		return streamEvent{key: evKey{x, s}, job: job, event: event, run: run}
	}
	stored := []streamEvent{
		ev(10, 1, "a", "enqueued", 0), ev(11, 2, "a", "started", 1), ev(12, 5, "a", "failed", 1),
		ev(12, 6, "b", "enqueued", 0), ev(13, 3, "a", "started", 2), ev(14, 7, "a", "completed", 2),
	}
	jobs := map[string]evJob{
		"a": {optedIn: true, runs: 2, journal: []string{"failed", "completed"}, known: true},
		"b": {optedIn: true, runs: 0, known: true},
		"c": {optedIn: false, runs: 1, known: true},
	}
	if v := eventViolations(stored, stored, jobs); len(v) != 0 {
		t.Fatalf("a complete read: %v", v)
	}
	with := func(f func([]streamEvent) []streamEvent) []streamEvent {
		return f(append([]streamEvent(nil), stored...))
	}
	cases := []struct {
		name string
		read []streamEvent
		jobs map[string]evJob
		want string
	}{
		{"repeated after a restart", with(func(r []streamEvent) []streamEvent { return append(r[:3:3], append([]streamEvent{r[2]}, r[3:]...)...) }), jobs, "read twice"},
		{"missed (a late commit passed by)", with(func(r []streamEvent) []streamEvent { return append(r[:1:1], r[2:]...) }), jobs, "never read"},
		{"out of order", with(func(r []streamEvent) []streamEvent { r[1], r[2] = r[2], r[1]; return r }), jobs, "out of cursor order"},
		{"invented", append(with(func(r []streamEvent) []streamEvent { return r }), ev(20, 9, "a", "completed", 3)), jobs, "not stored"},
		{"journal disagrees", stored, map[string]evJob{"a": {optedIn: true, runs: 2, journal: []string{"failed", "paused", "completed"}, known: true}}, "journal has"},
		{"a run without a start", stored, map[string]evJob{"a": {optedIn: true, runs: 3, journal: []string{"failed", "completed"}, known: true}}, "want its 3 runs"},
		{"not opted in", append(with(func(r []streamEvent) []streamEvent { return r }), ev(30, 1, "c", "enqueued", 0)), map[string]evJob{"c": {runs: 0}}, "did not opt in"},
	}
	for _, c := range cases {
		st := stored
		if c.name == "not opted in" {
			st = append(append([]streamEvent(nil), stored...), ev(30, 1, "c", "enqueued", 0))
		}
		v := eventViolations(c.read, st, c.jobs)
		if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), c.want) {
			t.Errorf("%s: violations %q, want one containing %q", c.name, v, c.want)
		}
	}
	// An enqueue without its event.
	v := eventViolations(stored[1:], stored[1:], map[string]evJob{"a": jobs["a"]})
	if !strings.Contains(strings.Join(v, "\n"), "0 enqueued events") {
		t.Errorf("missing enqueue: %q", v)
	}
}
