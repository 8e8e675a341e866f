package venturi

import (
	"testing"

	"github.com/oklog/ulid/v2"
)

// TestHubHoldsAStartUntilThePreviousRunsEnd: the completer publishes a run's end after its
// result is durable, by which time the job may have been claimed again; the next run's
// started event waits for that end, so a subscriber sees each job's events in order. Other
// jobs' events are not held, an end given up releases what it held, and ends handed over
// while nobody subscribed are not waited for.
func TestHubHoldsAStartUntilThePreviousRunsEnd(t *testing.T) {
	t.Parallel()
	h := &eventHub{}
	sub := h.subscribe(SubscribeConfig{Buffer: 16})
	a, b := ulid.Make(), ulid.Make()
	got := func() []string {
		var out []string
		for {
			select {
			case e := <-sub.Events():
				out = append(out, e.JobID.String()[24:]+":"+string(e.Event))
			default:
				return out
			}
		}
	}
	name := func(id ulid.ULID, e Event) string { return id.String()[24:] + ":" + string(e) }
	check := func(step string, want ...string) {
		t.Helper()
		g := got()
		if len(g) != len(want) {
			t.Fatalf("%s: got %v, want %v", step, g, want)
		}
		for i := range g {
			if g[i] != want[i] {
				t.Fatalf("%s: got %v, want %v", step, g, want)
			}
		}
	}

	h.publishStart(JobEvent{Event: EventStarted, JobID: a})
	h.endPending(a) // run 1 ends, handed to the completer
	h.publishStart(JobEvent{Event: EventStarted, JobID: a, Run: 2})
	h.publishStart(JobEvent{Event: EventStarted, JobID: b})
	check("before the end", name(a, EventStarted), name(b, EventStarted))
	ev := JobEvent{Event: EventFailed, JobID: a}
	h.publishEnd(a, &ev)
	check("after the end", name(a, EventFailed), name(a, EventStarted))

	h.endPending(b)
	h.publishStart(JobEvent{Event: EventStarted, JobID: b, Run: 2})
	h.publishEnd(b, nil) // given up: nothing to publish, the start goes out
	check("after an end given up", name(b, EventStarted))
	if n := h.pendingEnds.Load(); n != 0 || len(h.ends) != 0 || len(h.held) != 0 {
		t.Fatalf("bookkeeping left: %d pending, %v, %v", n, h.ends, h.held)
	}

	// Ends handed over with nobody subscribed are not tracked; a subscriber that leaves
	// with ends pending leaves nothing behind once they are published.
	sub.Close()
	h.endPending(a)
	if h.tracksEnds() {
		t.Fatal("an end is tracked with nobody subscribed")
	}
	sub = h.subscribe(SubscribeConfig{Buffer: 16})
	h.endPending(a)
	h.publishStart(JobEvent{Event: EventStarted, JobID: a, Run: 3})
	sub.Close()
	if !h.tracksEnds() {
		t.Fatal("a pending end is not tracked after its subscriber left")
	}
	h.publishEnd(a, &ev)
	if n := h.pendingEnds.Load(); n != 0 || len(h.ends) != 0 || len(h.held) != 0 || h.tracksEnds() {
		t.Fatalf("bookkeeping left after the subscriber left: %d pending, %v, %v", n, h.ends, h.held)
	}
}
