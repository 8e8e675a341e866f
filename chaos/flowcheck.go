package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/venturi-dev/venturi"
)

// Flow control, checked from the journals alone. Every run of a job has a journal entry
// with StartedAt (the claim's database time) and At (StartedAt plus the duration the
// worker measured up to the handler's return; for an abandoned run, the database time of
// the rescue). venturi guarantees that by these times no gate is ever exceeded:
//
//   - a slot, a kind's concurrency or a queue's concurrency: at no instant do more of the
//     gate's [StartedAt, At] intervals overlap than its limit, where an interval that ends
//     when another starts does not overlap it;
//   - a rate of N per Per: no half-open window [t, t+Per) holds more than N StartedAt
//     values of the gate (of one partition, for a rate per partition).

// flowRun is one run of a flow-controlled job, as its journal entry records it.
type flowRun struct {
	job      [16]byte
	scenario string
	run      int
	worker   string
	slotKey  string // slot, drop and replace
	slotLim  int
	part     string
	from, to time.Time // StartedAt, At
}

// gateKind says how a gate limits its runs.
type gateKind int

const (
	gateOverlap gateKind = iota // at most limit runs at once
	gateRate                    // at most limit starts in any window of length per
)

// gate is one limit of the workload, with the runs it governs.
type gate struct {
	name  string // "slot slot-1a", "kind chaos.capped", "queue chaos-limited", "rate chaos.rated tenant-a"
	kind  gateKind
	limit int
	per   time.Duration // gateRate
	runs  []flowRun
}

// gateResult is the most a gate held: runs at once, or starts in one window.
type gateResult struct {
	gate *gate
	peak int
	at   time.Time // the instant (overlap) or window start (rate) where the peak is reached
}

// flowGates groups runs by the gates the workload subjects them to, in name order.
func flowGates(runs []flowRun) []*gate {
	byName := map[string]*gate{}
	add := func(name string, kind gateKind, limit int, per time.Duration, r flowRun) {
		g := byName[name]
		if g == nil {
			g = &gate{name: name, kind: kind, limit: limit, per: per}
			byName[name] = g
		}
		g.runs = append(g.runs, r)
	}
	for _, r := range runs {
		switch r.scenario {
		case scSlot, scDrop, scReplace:
			add("slot "+r.slotKey, gateOverlap, max(r.slotLim, 1), 0, r)
		case scCapped:
			add("kind "+Capped{}.Kind(), gateOverlap, cappedConcurrency, 0, r)
		case scChunk:
			add("kind "+ChunkJob{}.Kind(), gateOverlap, chunkConcurrency, 0, r)
		case scQueued:
			add("queue "+limitedQueue, gateOverlap, limitedQueueConcurrency, 0, r)
		case scRated:
			add("rate "+Rated{}.Kind()+" "+r.part, gateRate, ratedN, ratedPer, r)
		}
	}
	out := make([]*gate, 0, len(byName))
	for _, g := range byName {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *gate) int { return strings.Compare(a.name, b.name) })
	return out
}

// measure finds the gate's peak.
func (g *gate) measure() gateResult {
	if g.kind == gateRate {
		starts := make([]time.Time, len(g.runs))
		for i, r := range g.runs {
			starts[i] = r.from
		}
		n, at := maxInWindow(starts, g.per)
		return gateResult{gate: g, peak: n, at: at}
	}
	spans := make([]span, len(g.runs))
	for i, r := range g.runs {
		spans[i] = span{r.from, r.to}
	}
	n, at := maxOverlap(spans)
	return gateResult{gate: g, peak: n, at: at}
}

// evidence lists the runs that make up a peak: the runs running at the instant, or the
// starts in the window.
func (res gateResult) evidence() string {
	g := res.gate
	var in []flowRun
	for _, r := range g.runs {
		if g.kind == gateRate {
			if !r.from.Before(res.at) && r.from.Before(res.at.Add(g.per)) {
				in = append(in, r)
			}
		} else if s := (span{r.from, r.to}).norm(); !s.from.After(res.at) && s.to.After(res.at) {
			in = append(in, r)
		}
	}
	slices.SortFunc(in, func(a, b flowRun) int { return a.from.Compare(b.from) })
	var parts []string
	for _, r := range in {
		parts = append(parts, fmt.Sprintf("%s#%d on %s [%s, %s]", ulidStr(r.job), r.run, r.worker,
			r.from.Format("15:04:05.000000"), r.to.Format("15:04:05.000000")))
	}
	return strings.Join(parts, "; ")
}

// span is a run's [from, to] by the journal's times.
type span struct{ from, to time.Time }

// norm makes s half-open, [from, to): a run that ends when another starts does not
// overlap it. An empty or reversed span (a run measured as taking no time) still holds
// its instant: it becomes [from, from+1ns).
func (s span) norm() span {
	if !s.to.After(s.from) {
		s.to = s.from.Add(time.Nanosecond)
	}
	return s
}

// maxOverlap is the most spans that hold one instant, and the first instant where that
// many do. An end equal to a start is not an overlap.
func maxOverlap(spans []span) (int, time.Time) {
	type event struct {
		at time.Time
		d  int
	}
	evs := make([]event, 0, 2*len(spans))
	for _, s := range spans {
		s = s.norm()
		evs = append(evs, event{s.from, +1}, event{s.to, -1})
	}
	slices.SortFunc(evs, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // ends before starts at one instant
	})
	n, peak := 0, 0
	var at time.Time
	for _, e := range evs {
		n += e.d
		if n > peak {
			peak, at = n, e.at
		}
	}
	return peak, at
}

// maxInWindow is the most starts that one half-open window [t, t+per) holds, and the
// first such t (a start: a window can always slide right to its first start).
func maxInWindow(starts []time.Time, per time.Duration) (int, time.Time) {
	s := slices.Clone(starts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	peak := 0
	var at time.Time
	j := 0
	for i := range s {
		for j < len(s) && s[j].Before(s[i].Add(per)) {
			j++
		}
		if j-i > peak {
			peak, at = j-i, s[i]
		}
	}
	return peak, at
}

// isFlow reports whether a scenario is flow-controlled.
func isFlow(scenario string) bool {
	switch scenario {
	case scSlot, scDrop, scReplace, scCapped, scRated, scQueued, scChunk:
		return true
	}
	return false
}

// stateOK reports whether state is one of the scripted states ("a" or "a|b").
func stateOK(want, state string) bool {
	return slices.Contains(strings.Split(want, "|"), state)
}

// ---- the checker's use of the above -----------------------------------------------------

// checkFlowJob checks a job's flow-control declarations and ends against its script, and
// collects its runs for the gates. groupDone counts the completed jobs of each drop and
// replace burst.
func (r *report) checkFlowJob(id [16]byte, e expectRow, j *jobRow, runs *[]flowRun, groupDone map[string]int) {
	var dropped, replaced []venturi.JournalEntry
	for _, en := range j.journal {
		switch en.Event {
		case venturi.EventDropped:
			dropped = append(dropped, en)
		case venturi.EventReplaced:
			replaced = append(replaced, en)
		}
	}
	r.dropped += len(dropped)
	r.replaced += len(replaced)
	if !isFlow(e.scenario) {
		if len(dropped)+len(replaced) > 0 {
			r.fail(invFlowEnd, "job %s (%s) takes no slot but has %d dropped and %d replaced entries", ulidStr(id), e.scenario, len(dropped), len(replaced))
		}
		return
	}

	// The gates venturi stored for the job are the scripted ones.
	str := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return fmt.Sprintf("%q", *p)
	}
	num := func(p *int) string {
		if p == nil {
			return "NULL"
		}
		return fmt.Sprint(*p)
	}
	wantPart, wantKey, wantLim, wantPol, wantQueue := "NULL", "NULL", "NULL", "NULL", venturi.DefaultQueue
	switch e.scenario {
	case scSlot, scDrop, scReplace:
		pol := map[string]venturi.SlotPolicy{scSlot: venturi.SlotQueue, scDrop: venturi.SlotDropIfRunning, scReplace: venturi.SlotReplace}[e.scenario]
		wantPart, wantKey = fmt.Sprintf("%q", e.slotKey), fmt.Sprintf("%q", e.slotKey)
		wantLim, wantPol = fmt.Sprint(e.slotLim), fmt.Sprint(int(pol))
	case scCapped, scRated, scChunk:
		wantPart = fmt.Sprintf("%q", e.part)
	case scQueued:
		wantQueue = limitedQueue
	}
	got := fmt.Sprintf("queue %q, part %s, slot %s limit %s policy %s", j.queue, str(j.part), str(j.slotKey), num(j.slotLim), num(j.slotPol))
	want := fmt.Sprintf("queue %q, part %s, slot %s limit %s policy %s", wantQueue, wantPart, wantKey, wantLim, wantPol)
	if got != want {
		r.fail(invFlowEnd, "job %s (%s) is stored with %s, scripted %s", ulidStr(id), e.scenario, got, want)
	}

	for _, en := range j.journal {
		if endEvents[en.Event] && en.Run > 0 && !en.StartedAt.IsZero() {
			*runs = append(*runs, flowRun{job: id, scenario: e.scenario, run: en.Run, worker: en.Worker,
				slotKey: e.slotKey, slotLim: e.slotLim, part: e.part, from: en.StartedAt, to: en.At})
		}
	}

	last := func() venturi.JournalEntry { // the last run's end
		var l venturi.JournalEntry
		for _, en := range j.journal {
			if endEvents[en.Event] && en.Run >= l.Run {
				l = en
			}
		}
		return l
	}
	switch e.scenario {
	case scDrop, scReplace:
		if r.flowEnds[e.scenario] == nil {
			r.flowEnds[e.scenario] = map[string]int{}
		}
		r.flowEnds[e.scenario][j.state]++
		if _, ok := groupDone[e.group]; !ok {
			groupDone[e.group] = 0
		}
		if j.state == "completed" {
			groupDone[e.group]++
		}
		if r.burstJobs == nil {
			r.burstJobs = map[string][]string{}
		}
		var ends []string
		for _, en := range j.journal {
			w := ""
			if en.Worker != "" {
				w = " " + en.Worker
			}
			ends = append(ends, fmt.Sprintf("%s#%d/%d at %s%s", en.Event, en.Run, en.Token, en.At.Format("15:04:05.000"), w))
		}
		r.burstJobs[e.group] = append(r.burstJobs[e.group], fmt.Sprintf("%s %s runs %d [%s]", ulidStr(id), j.state, j.runs, strings.Join(ends, "; ")))
	}
	switch {
	case e.scenario == scDrop && len(replaced) > 0, e.scenario == scReplace && len(dropped) > 0,
		e.scenario != scDrop && e.scenario != scReplace && len(dropped)+len(replaced) > 0:
		r.fail(invFlowEnd, "job %s (%s) has %d dropped and %d replaced entries", ulidStr(id), e.scenario, len(dropped), len(replaced))
	case e.scenario == scDrop && j.state == "cancelled":
		switch n := len(j.journal); {
		case len(dropped) != 1:
			r.fail(invFlowEnd, "dropped job %s has %d dropped entries", ulidStr(id), len(dropped))
		case !strings.Contains(dropped[0].Note, e.slotKey):
			r.fail(invFlowEnd, "dropped job %s: note %q does not name its slot %s", ulidStr(id), dropped[0].Note, e.slotKey)
		case j.journal[n-1].Event != venturi.EventDropped:
			r.fail(invFlowEnd, "dropped job %s: its journal does not end with the drop (%s)", ulidStr(id), events(j.journal))
		}
	case e.scenario == scReplace && j.state == "cancelled":
		if l := last(); len(replaced) != 1 || l.Event != venturi.EventReplaced || l.Run != j.runs {
			r.fail(invFlowEnd, "replaced job %s (runs %d): %d replaced entries, last run ended %s#%d", ulidStr(id), j.runs, len(replaced), l.Event, l.Run)
		}
	case (e.scenario == scDrop || e.scenario == scReplace) && j.state == "completed":
		if len(dropped)+len(replaced) > 0 {
			r.fail(invFlowEnd, "completed job %s (%s) has %d dropped and %d replaced entries", ulidStr(id), e.scenario, len(dropped), len(replaced))
		}
	}
}

// checkGates holds every gate to its limit, and every drop or replace burst to at least
// one completed job (a job is dropped or replaced only while another job of its slot
// runs, and the last one left runs to its end).
func (r *report) checkGates(runs []flowRun, groupDone map[string]int) {
	for _, g := range flowGates(runs) {
		res := g.measure()
		r.gates = append(r.gates, res)
		if res.peak <= g.limit {
			continue
		}
		inv := map[string]string{"slot": invSlot, "kind": invKindConc, "queue": invQueueConc, "rate": invRate}[strings.Fields(g.name)[0]]
		what := "runs at once at"
		if g.kind == gateRate {
			what = fmt.Sprintf("starts in the %v window from", g.per)
		}
		r.fail(inv, "%s: %d %s %s, limit %d: %s", g.name, res.peak, what, res.at.Format("15:04:05.000000"), g.limit, res.evidence())
	}
	var groups []string
	for g, n := range groupDone {
		if n == 0 {
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	for _, g := range groups {
		r.fail(invFlowEnd, "%s (drop or replace): no job of the burst completed: %s", g, strings.Join(r.burstJobs[g], " | "))
	}
}

// printFlow writes the gates' peaks: shared gates one by one, the per-burst slots of the
// drop and replace scenarios summed up.
func (r *report) printFlow(w io.Writer) {
	fmt.Fprintf(w, "flow control (most by the journal's times / limit)\n")
	type agg struct {
		keys, runs, peak, limit int
	}
	bursts := map[string]*agg{}
	for _, res := range r.gates {
		g := res.gate
		if p, ok := burstPrefix(g.name); ok {
			a := bursts[p]
			if a == nil {
				a = &agg{}
				bursts[p] = a
			}
			a.keys++
			a.runs += len(g.runs)
			a.peak, a.limit = max(a.peak, res.peak), max(a.limit, g.limit)
			continue
		}
		unit := "at once"
		if g.kind == gateRate {
			unit = "per " + g.per.String()
		}
		fmt.Fprintf(w, "  %-30s %3d / %d %-12s (%d runs)\n", g.name, res.peak, g.limit, unit, len(g.runs))
	}
	for _, p := range []string{"slot drop-*", "slot replace-*"} {
		if a := bursts[p]; a != nil {
			fmt.Fprintf(w, "  %-30s %3d / %d %-12s (%d runs, %d keys)\n", p, a.peak, a.limit, "at once", a.runs, a.keys)
		}
	}
	for _, sc := range []string{scDrop, scReplace} {
		if m := r.flowEnds[sc]; m != nil {
			fmt.Fprintf(w, "  %-30s completed %d, cancelled %d\n", sc+" jobs", m["completed"], m["cancelled"])
		}
	}
	fmt.Fprintf(w, "  %-30s dropped %d, replaced %d\n", "journal entries", r.dropped, r.replaced)
}

// burstPrefix maps a per-burst slot gate to its scenario's line.
func burstPrefix(name string) (string, bool) {
	for _, p := range []string{"slot drop-", "slot replace-"} {
		if strings.HasPrefix(name, p) {
			return p + "*", true
		}
	}
	return "", false
}
