package main

import (
	"strings"
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
	terminatedRun := func(pid int, from, to float64) venturi.JournalEntry {
		en := run(pid, from, to)
		en.Event, en.Note = venturi.EventFailed, "record start: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)"
		return en
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
		// A connection terminated by the burst while idle in a pool fails its next use.
		{"terminated connection used long after the burst", terminatedRun(300, 80, 82), 3},
		{"terminated connection before any burst or restart", terminatedRun(300, 30, 32), -1},
		{"terminated connection: a stop of the same process before explains nothing", terminatedRun(200, 30, 32), -1},
	}
	for _, c := range cases {
		if got := attribute(c.en, faults, 2*time.Second); got != c.want {
			t.Errorf("%s: attribute = %d, want %d", c.name, got, c.want)
		}
	}
}

// The rolling deploy's faults (rolling.go): a migration holds every worker up, a
// replacement only the worker it stops.
func TestAttributeRollingDeploy(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	faults := []faultRow{
		{kind: "migrate", at: at(10), until: at(10.5)},
		{kind: "upgrade", at: at(30), until: at(31), worker: 2, pid: 200},
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
		{"run of any worker held up by the migration", run(100, 9, 12), 0},
		{"run ending a lease after the migration", run(100, 11, 12.4), 0},
		{"run after the migration and its lease", run(100, 14, 16), -1},
		{"run of the replaced worker", run(200, 29, 32), 1},
		{"run of another worker during the replacement", run(300, 29, 32), -1},
	}
	for _, c := range cases {
		if got := attribute(c.en, faults, 2*time.Second); got != c.want {
			t.Errorf("%s: attribute = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestOrphanedClaim(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	faults := []faultRow{
		{kind: "sigkill", at: at(10), until: at(10), pid: 100},
		{kind: "pg-restart-immediate", at: at(40), until: at(46)},
		{kind: "terminate-burst", at: at(60), until: at(61)},
	}
	run := func(ev venturi.Event, from, to float64) venturi.JournalEntry {
		return venturi.JournalEntry{Event: ev, Worker: "chaos-worker-1-pid300", StartedAt: at(from), At: at(to)}
	}
	for _, c := range []struct {
		name string
		en   venturi.JournalEntry
		want int
	}{
		{"claimed 2.7s after the restart, abandoned", run(venturi.EventAbandoned, 48.7, 50.8), 1},
		{"claimed 5s after the restart", run(venturi.EventAbandoned, 51, 53), 1},
		{"claimed 5.1s after the restart", run(venturi.EventAbandoned, 51.1, 53), -1},
		{"claimed before the restart", run(venturi.EventAbandoned, 39, 48), -1},
		{"not abandoned", run(venturi.EventInterrupted, 48, 49), -1},
		{"after a terminate burst", run(venturi.EventAbandoned, 62, 64), -1},
	} {
		if got := orphanedClaim(c.en, faults); got != c.want {
			t.Errorf("%s: orphanedClaim = %d, want %d", c.name, got, c.want)
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

func TestMaxOverlap(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	sp := func(a, b int) span { return span{ms(a), ms(b)} }
	cases := []struct {
		name   string
		spans  []span
		want   int
		wantAt time.Duration
	}{
		{"none", nil, 0, 0},
		{"one", []span{sp(0, 10)}, 1, 0},
		{"end equal to a start is not an overlap", []span{sp(0, 10), sp(10, 20), sp(20, 30)}, 1, 0},
		{"chain, given out of order", []span{sp(20, 30), sp(0, 10), sp(10, 20)}, 1, 0},
		{"two overlap by a nanosecond", []span{sp(0, 10), {ms(10).Add(-time.Nanosecond), ms(20)}}, 2, 10*time.Millisecond - time.Nanosecond},
		{"nested", []span{sp(0, 100), sp(10, 20), sp(15, 30), sp(40, 50)}, 3, 15 * time.Millisecond},
		{"the peak is not at the first start", []span{sp(0, 5), sp(10, 40), sp(20, 40), sp(30, 50), sp(45, 60)}, 3, 30 * time.Millisecond},
		{"identical spans", []span{sp(0, 10), sp(0, 10), sp(0, 10)}, 3, 0},
		{"a zero-length run holds its instant", []span{sp(0, 10), sp(5, 5)}, 2, 5 * time.Millisecond},
		{"a zero-length run at another's end", []span{sp(0, 10), sp(10, 10)}, 1, 0},
		{"a reversed span counts as its start", []span{sp(0, 10), sp(5, 3)}, 2, 5 * time.Millisecond},
	}
	for _, c := range cases {
		n, at := maxOverlap(c.spans)
		if n != c.want || (n > 0 && !at.Equal(base.Add(c.wantAt))) {
			t.Errorf("%s: maxOverlap = %d at %v, want %d at %v", c.name, n, at.Sub(base), c.want, c.wantAt)
		}
	}
}

func TestMaxInWindow(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ms := func(ns ...int) []time.Time {
		var out []time.Time
		for _, n := range ns {
			out = append(out, base.Add(time.Duration(n)*time.Millisecond))
		}
		return out
	}
	per := 500 * time.Millisecond
	cases := []struct {
		name   string
		starts []time.Time
		want   int
		wantAt int
	}{
		{"none", nil, 0, 0},
		{"five at once", ms(0, 0, 0, 0, 0), 5, 0},
		{"a start exactly Per later is in the next window", ms(0, 0, 0, 0, 0, 500, 500, 500, 500, 500), 5, 0},
		{"a start just under Per later is in the window", append(ms(0, 0, 0, 0, 0), base.Add(per-time.Nanosecond)), 6, 0},
		{"the densest window is found anywhere", ms(0, 400, 900, 1000, 1100, 1200, 1300, 1350, 2000), 6, 900},
		{"unsorted", ms(1300, 0, 1100, 900, 1000, 1200, 400, 1350, 2000), 6, 900},
		{"steady rate", ms(0, 100, 200, 300, 400, 500, 600, 700, 800, 900), 5, 0},
	}
	for _, c := range cases {
		n, at := maxInWindow(c.starts, per)
		if n != c.want || (n > 0 && !at.Equal(base.Add(time.Duration(c.wantAt)*time.Millisecond))) {
			t.Errorf("%s: maxInWindow = %d at %v, want %d at %dms", c.name, n, at.Sub(base), c.want, c.wantAt)
		}
	}
}

func TestFlowGates(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	run := func(sc, key string, limit int, part string, from, to int) flowRun {
		return flowRun{scenario: sc, slotKey: key, slotLim: limit, part: part, run: 1, worker: "chaos-worker-1-pid1", from: ms(from), to: ms(to)}
	}
	runs := []flowRun{
		// slot-1a, limit 1: back to back, never two at once.
		run(scSlot, "slot-1a", 1, "slot-1a", 0, 50), run(scSlot, "slot-1a", 1, "slot-1a", 50, 90),
		// slot-2a, limit 2: three at once from 20ms.
		run(scSlot, "slot-2a", 2, "slot-2a", 0, 40), run(scSlot, "slot-2a", 2, "slot-2a", 10, 40), run(scSlot, "slot-2a", 2, "slot-2a", 20, 30),
		// A drop burst's own key; a replace run ends when the newer one starts.
		run(scDrop, "drop-burst-7", 1, "drop-burst-7", 0, 200),
		run(scReplace, "replace-burst-9", 1, "replace-burst-9", 0, 300), run(scReplace, "replace-burst-9", 1, "replace-burst-9", 300, 700),
		// Kind concurrency 3 over two partitions: 3 at once.
		run(scCapped, "", 0, "cap-a", 0, 100), run(scCapped, "", 0, "cap-b", 0, 100), run(scCapped, "", 0, "cap-a", 50, 150),
		run(scCapped, "", 0, "cap-b", 100, 200),
		// The limited queue: 3 at once (limit 2).
		run(scQueued, "", 0, "", 0, 100), run(scQueued, "", 0, "", 50, 150), run(scQueued, "", 0, "", 60, 70),
		// Rate 5 per 500ms per partition: tenant-a 6 starts in [0, 500), tenant-b 5, and
		// both together would be 11: partitions are apart.
		run(scRated, "", 0, "tenant-a", 0, 10), run(scRated, "", 0, "tenant-a", 0, 10), run(scRated, "", 0, "tenant-a", 100, 110),
		run(scRated, "", 0, "tenant-a", 200, 210), run(scRated, "", 0, "tenant-a", 300, 310), run(scRated, "", 0, "tenant-a", 499, 510),
		run(scRated, "", 0, "tenant-b", 0, 10), run(scRated, "", 0, "tenant-b", 100, 110), run(scRated, "", 0, "tenant-b", 200, 210),
		run(scRated, "", 0, "tenant-b", 300, 310), run(scRated, "", 0, "tenant-b", 400, 410), run(scRated, "", 0, "tenant-b", 500, 510),
		// Not flow-controlled: no gate.
		run(scOK, "", 0, "", 0, 1000),
	}
	type want struct {
		limit, peak, runs int
	}
	wants := map[string]want{
		"slot slot-1a":              {1, 1, 2},
		"slot slot-2a":              {2, 3, 3},
		"slot drop-burst-7":         {1, 1, 1},
		"slot replace-burst-9":      {1, 1, 2},
		"kind chaos.capped":         {cappedConcurrency, 3, 4},
		"queue chaos-limited":       {limitedQueueConcurrency, 3, 3},
		"rate chaos.rated tenant-a": {ratedN, 6, 6},
		"rate chaos.rated tenant-b": {ratedN, 5, 6},
	}
	gates := flowGates(runs)
	if len(gates) != len(wants) {
		var names []string
		for _, g := range gates {
			names = append(names, g.name)
		}
		t.Fatalf("gates %v, want %d", names, len(wants))
	}
	for i, g := range gates {
		if i > 0 && gates[i-1].name >= g.name {
			t.Errorf("gates not in name order: %s before %s", gates[i-1].name, g.name)
		}
		w, ok := wants[g.name]
		if !ok {
			t.Errorf("unexpected gate %s", g.name)
			continue
		}
		res := g.measure()
		if g.limit != w.limit || res.peak != w.peak || len(g.runs) != w.runs {
			t.Errorf("%s: limit %d peak %d runs %d, want %d %d %d", g.name, g.limit, res.peak, len(g.runs), w.limit, w.peak, w.runs)
		}
		if n := strings.Count(res.evidence(), "chaos-worker-1-pid1"); n != res.peak {
			t.Errorf("%s: the evidence lists %d runs, the peak is %d: %s", g.name, n, res.peak, res.evidence())
		}
	}

	// The report fails exactly the gates over their limits, each under its invariant.
	r := &report{flowEnds: map[string]map[string]int{}}
	for _, n := range []string{invSlot, invKindConc, invQueueConc, invRate, invFlowEnd} {
		r.invariants = append(r.invariants, invariant{name: n})
	}
	r.checkGates(runs, map[string]int{"burst-7": 1, "burst-9": 0})
	bad := map[string]int{}
	for _, inv := range r.invariants {
		bad[inv.name] = inv.bad
	}
	for inv, n := range map[string]int{invSlot: 1, invKindConc: 0, invQueueConc: 1, invRate: 1, invFlowEnd: 1} {
		if bad[inv] != n {
			t.Errorf("%s: %d violations, want %d (%v)", inv, bad[inv], n, r.violations)
		}
	}
}

func TestCheckFlowJob(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	sp := func(s string) *string { return &s }
	ip := func(n int) *int { return &n }
	end := func(ev venturi.Event, run int, from, to int) venturi.JournalEntry {
		return venturi.JournalEntry{Event: ev, Run: run, Token: int64(run), Worker: "chaos-worker-1-pid1", StartedAt: ms(from), At: ms(to)}
	}
	dropped := venturi.JournalEntry{Event: venturi.EventDropped, Note: "dropped: slot drop-burst-1 is full (1 of 1 running; policy DropIfRunning)", At: ms(5)}
	slotJob := func(key string, policy int, state string, runs int, journal ...venturi.JournalEntry) *jobRow {
		return &jobRow{queue: venturi.DefaultQueue, state: state, runs: runs, part: sp(key), slotKey: sp(key), slotLim: ip(1), slotPol: ip(policy), journal: journal}
	}
	dropExp := expectRow{scenario: scDrop, state: "completed|cancelled", group: "burst-1", slotKey: "drop-burst-1", slotLim: 1, part: "drop-burst-1"}
	replExp := expectRow{scenario: scReplace, state: "completed|cancelled", group: "burst-2", slotKey: "replace-burst-2", slotLim: 1, part: "replace-burst-2"}
	cases := []struct {
		name  string
		e     expectRow
		j     *jobRow
		bad   int // invFlowEnd violations
		runs  int // runs collected for the gates
		group int // the burst's completed jobs
	}{
		{"dropped at its first claim", dropExp, slotJob("drop-burst-1", 2, "cancelled", 0, dropped), 0, 0, 0},
		{"dropped after an abandoned run", dropExp, slotJob("drop-burst-1", 2, "cancelled", 1, end(venturi.EventAbandoned, 1, 0, 2500), dropped), 0, 1, 0},
		{"a drop job that completed", dropExp, slotJob("drop-burst-1", 2, "completed", 1, end(venturi.EventCompleted, 1, 0, 200)), 0, 1, 1},
		{"cancelled without a dropped entry", dropExp, slotJob("drop-burst-1", 2, "cancelled", 0), 1, 0, 0},
		{"completed after a drop", dropExp, slotJob("drop-burst-1", 2, "completed", 1, dropped, end(venturi.EventCompleted, 1, 0, 200)), 1, 1, 1},
		{"a drop note that names another slot", expectRow{scenario: scDrop, state: "completed|cancelled", group: "burst-3", slotKey: "drop-burst-3", slotLim: 1, part: "drop-burst-3"},
			slotJob("drop-burst-3", 2, "cancelled", 0, dropped), 1, 0, 0},
		{"replaced", replExp, slotJob("replace-burst-2", 1, "cancelled", 1, end(venturi.EventReplaced, 1, 0, 300)), 0, 1, 0},
		{"replaced on its second run", replExp, slotJob("replace-burst-2", 1, "cancelled", 2, end(venturi.EventAbandoned, 1, 0, 2500), end(venturi.EventReplaced, 2, 2600, 2700)), 0, 2, 0},
		{"cancelled, but the last run did not end replaced", replExp, slotJob("replace-burst-2", 1, "cancelled", 2, end(venturi.EventReplaced, 1, 0, 300), end(venturi.EventAbandoned, 2, 400, 2500)), 1, 2, 0},
		{"stored with the wrong policy", replExp, slotJob("replace-burst-2", 0, "completed", 1, end(venturi.EventCompleted, 1, 0, 300)), 1, 1, 1},
		{"a queued job", expectRow{scenario: scQueued, state: "completed"},
			&jobRow{queue: limitedQueue, state: "completed", runs: 1, journal: []venturi.JournalEntry{end(venturi.EventCompleted, 1, 0, 30)}}, 0, 1, 0},
		{"a queued job in the default queue", expectRow{scenario: scQueued, state: "completed"},
			&jobRow{queue: venturi.DefaultQueue, state: "completed", runs: 1, journal: []venturi.JournalEntry{end(venturi.EventCompleted, 1, 0, 30)}}, 1, 1, 0},
		{"a rated job in its partition", expectRow{scenario: scRated, state: "completed", part: "tenant-a"},
			&jobRow{queue: venturi.DefaultQueue, state: "completed", runs: 1, part: sp("tenant-a"), journal: []venturi.JournalEntry{end(venturi.EventCompleted, 1, 0, 30)}}, 0, 1, 0},
		{"a plain job with a dropped entry", expectRow{scenario: scOK, state: "completed"},
			&jobRow{queue: venturi.DefaultQueue, state: "completed", runs: 1, journal: []venturi.JournalEntry{dropped, end(venturi.EventCompleted, 1, 0, 30)}}, 1, 0, 0},
	}
	for _, c := range cases {
		r := &report{flowEnds: map[string]map[string]int{}, invariants: []invariant{{name: invFlowEnd}}}
		var runs []flowRun
		groups := map[string]int{}
		r.checkFlowJob([16]byte{1}, c.e, c.j, &runs, groups)
		if r.invariants[0].bad != c.bad || len(runs) != c.runs || groups[c.e.group] != c.group {
			t.Errorf("%s: %d violations, %d runs, burst completed %d; want %d, %d, %d (%v)", c.name,
				r.invariants[0].bad, len(runs), groups[c.e.group], c.bad, c.runs, c.group, r.violations)
		}
	}
}

func TestStateOK(t *testing.T) {
	for _, c := range []struct {
		want, state string
		ok          bool
	}{
		{"completed", "completed", true},
		{"completed", "cancelled", false},
		{"completed|cancelled", "cancelled", true},
		{"completed|cancelled", "completed", true},
		{"completed|cancelled", "dead", false},
		{"dead", "dead", true},
	} {
		if got := stateOK(c.want, c.state); got != c.ok {
			t.Errorf("stateOK(%q, %q) = %v", c.want, c.state, got)
		}
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

// The network faults explain the runs of the workers they cut off, and nothing else: a
// half-open cut only the cut process's runs, a PgBouncer restart only the runs of the
// workers behind PgBouncer (the fault's slot), so that neither hides an unexplained run
// of another worker.
func TestAttributeNetworkFaults(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	faults := []faultRow{
		{kind: "half-open", at: at(10), until: at(16), worker: 2, pid: 200},
		{kind: "pgbouncer-restart", at: at(30), until: at(31), worker: 3},
		{kind: "half-open", at: at(50), until: at(56), worker: 2, pid: 200},
		{kind: "half-open", at: at(58.6), until: at(64.6), worker: 2, pid: 200},
	}
	run := func(slot, pid int, from, to float64) venturi.JournalEntry {
		return venturi.JournalEntry{Event: venturi.EventAbandoned, Worker: "chaos-worker-" + itoa(slot) + "-pid" + itoa(pid),
			StartedAt: at(from), At: at(to)}
	}
	cases := []struct {
		name string
		en   venturi.JournalEntry
		want int
	}{
		{"run of the cut process, rescued during the cut", run(2, 200, 9, 12.3), 0},
		{"run of the cut process, ended after the heal", run(2, 200, 9.5, 17.5), 0},
		{"run of another process during the cut", run(1, 100, 9, 12.3), -1},
		{"run of the cut slot's next process", run(2, 201, 11, 13), -1},
		{"run of the cut process long after the heal", run(2, 200, 19, 21), -1},
		{"run behind PgBouncer during its restart", run(3, 300, 29, 30.5), 1},
		{"run behind PgBouncer right after it was back", run(3, 300, 31.5, 32.5), 1},
		{"run of a direct worker during the restart", run(1, 100, 29, 30.5), -1},
		{"run behind PgBouncer long after it", run(3, 300, 35, 36), -1},
		// chaos short run, 2026-12-02: cuts 8.6s apart; a run claimed after the first
		// healed and rescued 1.8s into the second was measured from the first (10.4s).
		{"run claimed after one cut healed, ended by the next", run(2, 200, 57, 60.4), 3},
		{"run ended by the first of two cuts", run(2, 200, 49, 52), 2},
	}
	for _, c := range cases {
		if got := attribute(c.en, faults, 2*time.Second); got != c.want {
			t.Errorf("%s: attribute = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestSlotOf(t *testing.T) {
	for in, want := range map[string]int{"chaos-worker-3-pid123": 3, "chaos-worker-12-pid9": 12, "other": 0, "chaos-worker-x-pid1": 0} {
		if got := slotOf(in); got != want {
			t.Errorf("slotOf(%q) = %d, want %d", in, got, want)
		}
	}
}

// Kills and half-open cuts are measured alone: a cut whose recovery window meets another
// fault (a PostgreSQL restart right after a heal, say) is left out of the bound's p99.
func TestIsolated(t *testing.T) {
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	faults := []faultRow{
		{kind: "sigkill", at: at(10), until: at(10), pid: 100},
		{kind: "half-open", at: at(30), until: at(36), worker: 2, pid: 200},
		{kind: "half-open", at: at(60), until: at(66), worker: 2, pid: 200},
		{kind: "pg-restart-fast", at: at(67), until: at(70)},
		{kind: "sigkill", at: at(90), until: at(90), pid: 100},
		{kind: "sigstop", at: at(93), until: at(95), pid: 101},
	}
	job := [16]byte{1}
	cfg := checkConfig{lease: 8 * time.Second}
	starts := map[[16]byte][]startRow{job: {{run: 1, at: at(0)}, {run: 2, at: at(100)}}}
	cases := []struct {
		name  string
		fault int
		want  bool
	}{
		{"a kill alone", 0, true},
		{"a half-open cut alone (its own fault is not another)", 1, true},
		{"a half-open cut with a restart in its window", 2, false},
		{"a kill with a stop in its window", 4, false},
	}
	for _, c := range cases {
		if got := isolated(cut{fault: c.fault, job: job, run: 1}, faults, starts, cfg); got != c.want {
			t.Errorf("%s: isolated = %v, want %v", c.name, got, c.want)
		}
	}
	noNext := map[[16]byte][]startRow{job: {{run: 1, at: at(0)}, {run: 3, at: at(100)}}}
	if isolated(cut{fault: 0, job: job, run: 1}, faults, noNext, cfg) {
		t.Error("a cut whose next run was itself cut before it started: isolated = true, want false")
	}
}
