package main

import (
	"strconv"
	"testing"

	"github.com/venturi-dev/venturi"
)

// TestCheckStepJob feeds the steps check clean and violating histories of a 3-step job:
// run 1 (token 11) memoized step-1 and was killed during the work before step-2; run 2
// (token 12) read step-1 back and ran the others.
func TestCheckStepJob(t *testing.T) {
	id := [16]byte{7}
	e := expectRow{scenario: scSteps, state: "completed", steps: 3}
	journal := []venturi.JournalEntry{
		{Event: venturi.EventAbandoned, Run: 1, Token: 11},
		{Event: venturi.EventCompleted, Run: 2, Token: 12},
	}
	memo := func(step string, run int, token int64) stepMemo {
		return stepMemo{step: step, run: run, token: token, result: strconv.FormatInt(token, 10)}
	}
	row := func(step string, run int, token int64) stepRow { return stepRow{step: step, run: run, token: token} }
	clean := func() *coordEvidence {
		return &coordEvidence{
			memos:   map[[16]byte][]stepMemo{id: {memo("step-1", 1, 11), memo("step-2", 2, 12), memo("step-3", 2, 12)}},
			execs:   map[[16]byte][]stepRow{id: {row("step-1", 1, 11), row("step-2", 1, 11), row("step-2", 2, 12), row("step-3", 2, 12)}},
			effects: map[[16]byte][]stepRow{id: {row("step-1", 1, 11), row("step-2", 2, 12), row("step-3", 2, 12)}},
		}
	}
	completion := &effectRow{run: 2, token: 12, outcome: "completed", counter: 3, value: 11 + 12 + 12}
	cases := []struct {
		name   string
		mutate func(ev *coordEvidence, c *effectRow)
		bad    int
	}{
		{"clean: step-1 read back, step-2's first execution cut before its commit", func(*coordEvidence, *effectRow) {}, 0},
		{"step-1 ran again in run 2 after run 1 memoized it", func(ev *coordEvidence, _ *effectRow) {
			ev.execs[id] = append(ev.execs[id], row("step-1", 2, 12))
		}, 1},
		{"step-1's effect committed twice", func(ev *coordEvidence, _ *effectRow) {
			ev.effects[id] = append(ev.effects[id], row("step-1", 2, 12))
		}, 3}, // by another run than the memo's, twice, and the completed job has 2 effects of it
		{"an effect without its memo", func(ev *coordEvidence, _ *effectRow) {
			ev.memos[id] = ev.memos[id][:2]
		}, 4}, // the effect, the missing memo, the memo count, the sum
		{"the completion did not read step-1 back", func(_ *coordEvidence, c *effectRow) { c.value = 12 + 12 + 12 }, 1},
		{"a memo under a token that ended no run", func(ev *coordEvidence, _ *effectRow) {
			ev.memos[id][0] = memo("step-1", 1, 99)
		}, 3}, // the memo's token, the effect's token differs from the memo's, the sum
		{"a step ran twice in one run", func(ev *coordEvidence, _ *effectRow) {
			ev.execs[id] = append(ev.execs[id], row("step-3", 2, 12))
		}, 1},
	}
	for _, c := range cases {
		ev := clean()
		comp := *completion
		c.mutate(ev, &comp)
		r := &report{invariants: []invariant{{name: invSteps}}}
		r.checkStepJob(id, e, &jobRow{state: "completed", runs: 2, journal: journal}, ev, &comp)
		if r.invariants[0].bad != c.bad {
			t.Errorf("%s: %d violations, want %d: %v", c.name, r.invariants[0].bad, c.bad, r.violations)
		}
		if c.bad == 0 && (r.coord.skipped != 1 || r.coord.cutAfterMemo != 1 || r.coord.reExecuted != 1) {
			t.Errorf("%s: stats %+v, want 1 skipped, 1 cut after a memo, 1 re-executed", c.name, r.coord)
		}
	}
}

// TestCheckWaitJob feeds the signals check clean and violating histories of a job that
// waited (run 1), was woken, and completed in run 3 after run 2 was abandoned.
func TestCheckWaitJob(t *testing.T) {
	id := [16]byte{9}
	journal := []venturi.JournalEntry{
		{Event: venturi.EventWaiting, Run: 1, Token: 21},
		{Event: venturi.EventAbandoned, Run: 2, Token: 22},
		{Event: venturi.EventCompleted, Run: 3, Token: 23},
	}
	tok := func(n int64) *int64 { return &n }
	clean := func() *coordEvidence {
		return &coordEvidence{
			signals: map[[16]byte][]signalRow{id: {{seq: 5, delivery: "go-x", consumed: tok(23)}}},
			reads:   map[[16]byte][]sigRead{id: {{run: 3, token: 23, seq: 5}}},
		}
	}
	cases := []struct {
		name   string
		mutate func(ev *coordEvidence, c *effectRow)
		bad    int
	}{
		{"clean", func(*coordEvidence, *effectRow) {}, 0},
		{"a repeated send stored twice", func(ev *coordEvidence, _ *effectRow) {
			ev.signals[id] = append(ev.signals[id], signalRow{seq: 6, delivery: "go-x", consumed: tok(23)})
		}, 1},
		{"consumed by the abandoned run", func(ev *coordEvidence, _ *effectRow) {
			ev.signals[id][0].consumed = tok(22)
		}, 2}, // consumed by an abandoned run, and read by run 3 although consumed by another
		{"read by two committed runs", func(ev *coordEvidence, c *effectRow) {
			ev.reads[id] = append(ev.reads[id], sigRead{run: 2, token: 22, seq: 5})
			c.counter = 2
		}, 3}, // read twice, by a token that did not consume it, by a run that did not complete
		{"left unconsumed", func(ev *coordEvidence, _ *effectRow) { ev.signals[id][0].consumed = nil }, 2},
		{"the completion miscounted", func(_ *coordEvidence, c *effectRow) { c.counter = 0 }, 1},
	}
	for _, c := range cases {
		ev := clean()
		comp := effectRow{run: 3, token: 23, outcome: "completed", counter: 1}
		c.mutate(ev, &comp)
		r := &report{invariants: []invariant{{name: invSignals}}}
		r.checkWaitJob(id, &jobRow{state: "completed", runs: 3, journal: journal}, ev, &comp)
		if r.invariants[0].bad != c.bad {
			t.Errorf("%s: %d violations, want %d: %v", c.name, r.invariants[0].bad, c.bad, r.violations)
		}
	}
}
