package main

import (
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// wfHistory builds the evidence of a finished workflow and a finished batch, as the
// database and the members would leave them, with every invariant holding:
//
//	a (root) -> b -> c <- g{m0}   c needs b and the group g, whose member is m0
//	b -> f (NeedsFailure: skipped, b completed) ; e needs f and c (NeedsEnded)
//	a -> sp (spawns sp/c0) -> t   t waits for sp and what it spawned
//
// and a batch of one member with on_success (completed, counts seen) and on_failure
// (skipped). Times are seconds after base.
type wfHistory struct {
	base time.Time
	ev   *wfEvidence
	w, b [16]byte
}

func (h *wfHistory) at(s float64) time.Time {
	return h.base.Add(time.Duration(s * float64(time.Second)))
}

func newWfHistory() *wfHistory {
	h := &wfHistory{base: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), w: [16]byte{1}, b: [16]byte{2}}
	ev := &wfEvidence{wfs: map[[16]byte]*wfRow{}, nodes: map[[16]byte]map[string]*nodeRow{},
		outputs: map[[16]byte]map[string]outputRow{}, scripts: map[[16]byte]wfScriptRow{}, members: map[[16]byte]memberRow{},
		reads: map[[16]byte][]readRow{}, cbs: map[[16]byte][]cbRow{}, ops: map[[16]byte][]opRow{},
		jobs: map[[16]byte]*jobRow{}, starts: map[[16]byte][]startRow{}, effects: map[[16]byte][]effectRow{}}
	h.ev = ev
	ev.wfs[h.w] = &wfRow{id: h.w, state: "succeeded", nodes: 10}
	ev.wfs[h.b] = &wfRow{id: h.b, batch: true, state: "succeeded", nodes: 4}
	ev.scripts[h.w] = wfScriptRow{}
	ev.scripts[h.b] = wfScriptRow{batch: true}
	ev.nodes[h.w] = map[string]*nodeRow{}
	ev.nodes[h.b] = map[string]*nodeRow{}
	ev.outputs[h.w] = map[string]outputRow{}
	ev.outputs[h.b] = map[string]outputRow{}
	jobNo := byte(10)
	token := int64(100)
	// job adds a job node that ran and completed: claimed at start-0.1, handler start at
	// start, completion effect at end-0.05, ended (settled) at end.
	job := func(wf [16]byte, name string, policy int, deps []string, parent string, root bool, start, end float64, counts [5]int) *nodeRow {
		jobNo++
		token++
		id := [16]byte{jobNo}
		n := &nodeRow{wf: wf, name: name, job: &id, policy: policy, deps: deps, parent: parent, released: true,
			run: "ok", own: "ok", outcome: "ok", contrib: "s", nDeps: len(deps), nSkip: counts[4], createdAt: h.at(0)}
		e := h.at(end)
		n.endedAt = &e
		ev.nodes[wf][name] = n
		var journal []venturi.JournalEntry
		if !root {
			journal = append(journal, venturi.JournalEntry{Event: "unblocked", At: h.at(start - 0.2)})
		}
		journal = append(journal, venturi.JournalEntry{Event: venturi.EventCompleted, Run: 1, Token: token, StartedAt: h.at(start - 0.1), At: h.at(end + 0.01)})
		ev.jobs[id] = &jobRow{id: id, state: "completed", runs: 1, journal: journal}
		ev.starts[id] = []startRow{{run: 1, token: token, at: h.at(start)}}
		ev.effects[id] = []effectRow{{run: 1, token: token, outcome: "completed", at: h.at(end - 0.05)}}
		ev.outputs[wf][name] = outputRow{token: token, held: token}
		ev.members[id] = memberRow{wf: wf, node: name, script: wfOK, root: root, spawns: -1}
		return n
	}
	job(h.w, "a", 0, nil, "", true, 1, 2, [5]int{})
	job(h.w, "b", 0, []string{"a"}, "", false, 3, 4, [5]int{})
	ev.nodes[h.w]["g"] = &nodeRow{wf: h.w, name: "g", sealed: true, own: "ok", outcome: "ok", contrib: "s", createdAt: h.at(0)}
	job(h.w, "m0", 0, nil, "g", true, 1, 2.5, [5]int{})
	job(h.w, "c", 0, []string{"b", "g"}, "", false, 5, 6, [5]int{})
	// f: NeedsFailure of b, skipped when b completed.
	fid := [16]byte{90}
	fe := h.at(4.1)
	ev.nodes[h.w]["f"] = &nodeRow{wf: h.w, name: "f", job: &fid, policy: 2, deps: []string{"b"}, nDeps: 1, own: "skip", outcome: "skip",
		contrib: "k", endedAt: &fe, createdAt: h.at(0)}
	ev.jobs[fid] = &jobRow{id: fid, state: "cancelled", journal: []venturi.JournalEntry{{Event: "skipped", At: h.at(4.1)}}}
	ev.members[fid] = memberRow{wf: h.w, node: "f", script: wfOK, spawns: -1}
	job(h.w, "e", 1, []string{"f", "c"}, "", false, 7, 8, [5]int{4: 1})
	sp := job(h.w, "sp", 0, []string{"a"}, "", false, 3, 4.5, [5]int{})
	m := ev.members[*sp.job]
	m.spawns = 1
	ev.members[*sp.job] = m
	c0 := job(h.w, "sp/c0", 0, nil, "sp", false, 5, 6.5, [5]int{})
	delete(ev.members, *c0.job) // spawned: known by its spawn record
	ev.spawns = append(ev.spawns, spawnRow{job: *sp.job, run: 1, token: ev.jobs[*sp.job].journal[1].Token, kind: "spawn", node: "sp/c0", child: *c0.job, script: wfOK})
	job(h.w, "t", 0, []string{"sp"}, "", false, 7, 8, [5]int{})
	// Reads: each run read what it waits for.
	read := func(wf [16]byte, name string, ups ...string) {
		n := ev.nodes[wf][name]
		en := ev.jobs[*n.job].journal[len(ev.jobs[*n.job].journal)-1]
		rs := []readRow{{run: en.Run, token: en.Token, node: ""}}
		for _, u := range ups {
			rs = append(rs, readRow{run: en.Run, token: en.Token, node: u, outTok: ev.outputs[wf][u].token})
		}
		ev.reads[*n.job] = rs
	}
	read(h.w, "b", "a")
	read(h.w, "c", "b", "m0")
	read(h.w, "e", "c")
	read(h.w, "sp", "a")
	read(h.w, "t", "sp", "sp/c0")

	// The batch: one member, on_success (completed, saw the final counts), on_failure skipped.
	ev.nodes[h.b][venturi.BatchMembers] = &nodeRow{wf: h.b, name: venturi.BatchMembers, sealed: true, own: "ok", outcome: "ok", contrib: "s"}
	job(h.b, "m", 0, nil, venturi.BatchMembers, true, 1, 2, [5]int{})
	cb := job(h.b, venturi.BatchOnSuccess, 0, []string{venturi.BatchMembers}, "", false, 3, 4, [5]int{})
	cb.deps = []string{venturi.BatchMembers}
	ev.members[*cb.job] = memberRow{wf: h.b, node: venturi.BatchOnSuccess, script: wfOK, spawns: -1}
	ev.cbs[*cb.job] = []cbRow{{run: 1, token: ev.jobs[*cb.job].journal[1].Token, which: venturi.BatchOnSuccess, total: 1, succeeded: 1}}
	read(h.b, venturi.BatchOnSuccess, "m")
	ofid := [16]byte{91}
	ofe := h.at(2.1)
	ev.nodes[h.b][venturi.BatchOnFailure] = &nodeRow{wf: h.b, name: venturi.BatchOnFailure, job: &ofid, policy: 2, deps: []string{venturi.BatchMembers},
		nDeps: 1, own: "skip", outcome: "skip", contrib: "k", endedAt: &ofe}
	ev.jobs[ofid] = &jobRow{id: ofid, state: "cancelled", journal: []venturi.JournalEntry{{Event: "skipped", At: ofe}}}
	ev.members[ofid] = memberRow{wf: h.b, node: venturi.BatchOnFailure, script: wfOK, spawns: -1}
	return h
}

func (h *wfHistory) node(wf [16]byte, name string) *nodeRow { return h.ev.nodes[wf][name] }

// TestWfViolations feeds the workflow checks a clean history, then histories that each
// break one invariant, and requires each violation to be reported under its invariant.
func TestWfViolations(t *testing.T) {
	h := newWfHistory()
	st, bad := wfViolations(h.ev)
	if len(bad) != 0 {
		t.Fatalf("a clean history: %d violations:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	if st.workflows != 1 || st.batches != 1 || st.spawned != 1 || st.decided["skip"] != 2 || st.reads != 8 || st.cbRan[venturi.BatchOnSuccess] != 1 {
		t.Errorf("stats of the clean history: %+v", st)
	}

	cases := []struct {
		name   string
		change func(h *wfHistory)
		inv    string
		want   string
	}{
		{"b started before a ended", func(h *wfHistory) {
			h.ev.starts[*h.node(h.w, "b").job][0].at = h.at(1.5)
		}, invWfEarly, "before a ended"},
		{"t started before the node sp spawned ended", func(h *wfHistory) {
			h.ev.starts[*h.node(h.w, "t").job][0].at = h.at(6)
		}, invWfEarly, "before sp/c0 ended"},
		{"c read an output of b that is not b's final one", func(h *wfHistory) {
			h.ev.reads[*h.node(h.w, "c").job][1].outTok = 7
		}, invWfEarly, "its final output is token"},
		{"c did not read the output of the group's member", func(h *wfHistory) {
			rs := h.ev.reads[*h.node(h.w, "c").job]
			h.ev.reads[*h.node(h.w, "c").job] = rs[:2]
		}, invWfEarly, "did not read the output of m0"},
		{"b read the output of a node it does not wait for", func(h *wfHistory) {
			h.ev.reads[*h.node(h.w, "b").job] = append(h.ev.reads[*h.node(h.w, "b").job], readRow{run: 1, node: "c", outTok: h.ev.outputs[h.w]["c"].token})
		}, invWfEarly, "which it does not wait for"},
		{"an output written under another token than the completion's", func(h *wfHistory) {
			h.ev.effects[*h.node(h.w, "a").job][0].token = 5
		}, invWfEarly, "committed completion token 5"},
		{"the compensation started although nothing it waits for failed", func(h *wfHistory) {
			h.ev.starts[*h.node(h.w, "f").job] = []startRow{{run: 1, token: 999, at: h.at(5)}}
		}, invWfEarly, "before anything it waits for failed"},
		{"b released twice in one arming", func(h *wfHistory) {
			j := h.ev.jobs[*h.node(h.w, "b").job]
			j.journal = append([]venturi.JournalEntry{{Event: "unblocked", At: h.at(2.5)}}, j.journal...)
		}, invWfRelease, "released twice in one arming"},
		{"b ran without a release", func(h *wfHistory) {
			j := h.ev.jobs[*h.node(h.w, "b").job]
			j.journal = j.journal[1:]
		}, invWfRelease, "without a release"},
		{"a callback completed twice", func(h *wfHistory) {
			id := *h.node(h.b, venturi.BatchOnSuccess).job
			h.ev.cbs[id] = append(h.ev.cbs[id], h.ev.cbs[id][0])
		}, invWfRelease, "completed 2 times"},
		{"inbox rows left", func(h *wfHistory) { h.ev.inbox = 3 }, invWfStuck, "inbox rows never settled"},
		{"a job left blocked", func(h *wfHistory) { h.ev.blocked = 1 }, invWfStuck, "still blocked"},
		{"a workflow left open with a node not propagated", func(h *wfHistory) {
			h.ev.wfs[h.w].state = "open"
			e := h.node(h.w, "e")
			e.run, e.own, e.outcome, e.contrib, e.released = "", "", "", "w", false
		}, invWfStuck, "nodes not propagated"},
		{"a scripted member has no node", func(h *wfHistory) {
			h.ev.members[[16]byte{200}] = memberRow{wf: h.w, node: "zz", script: wfOK}
		}, invWfStuck, "has no node"},
		{"a waiting counter off by one", func(h *wfHistory) { h.node(h.w, "b").waiting = 1 }, invWfCounters, "waiting 1 (recount 0)"},
		{"a holds counter off", func(h *wfHistory) { h.node(h.w, "sp").holds = 1 }, invWfCounters, "holds 1 (recount 0)"},
		{"open_nodes not zero", func(h *wfHistory) { h.ev.wfs[h.w].openNodes = 1 }, invWfCounters, "open_nodes 1 (recount 0)"},
		{"a propagated outcome that disagrees with the attached nodes", func(h *wfHistory) {
			c0 := h.node(h.w, "sp/c0")
			c0.run, c0.own, c0.outcome, c0.contrib = "fail", "fail", "fail", "f"
			h.ev.members[*c0.job] = memberRow{wf: h.w, node: "sp/c0", script: wfPermanent, spawns: -1}
		}, invWfCounters, `outcome "ok" (recount "fail")`},
		{"a workflow state its nodes do not give", func(h *wfHistory) { h.ev.wfs[h.w].state = "failed" }, invWfCounters, "its nodes say succeeded"},
		{"a node decided dfail that its needs do not decide", func(h *wfHistory) {
			f := h.node(h.w, "f")
			f.own, f.outcome, f.contrib = "dfail", "dfail", "f"
		}, invWfPropagate, `decided dfail, but what it needs decides "skip"`},
		{"a node ran whose Needs dependency failed", func(h *wfHistory) {
			b := h.node(h.w, "b")
			b.run, b.own, b.outcome, b.contrib = "fail", "fail", "fail", "f"
			h.ev.members[*b.job] = memberRow{wf: h.w, node: "b", script: wfPermanent, spawns: -1}
			delete(h.ev.outputs[h.w], "b")
			h.ev.reads[*h.node(h.w, "c").job] = h.ev.reads[*h.node(h.w, "c").job][:1]
		}, invWfPropagate, `ran (ok), but what it needs decides "dfail"`},
		{"a decided node started", func(h *wfHistory) {
			h.ev.starts[*h.node(h.w, "f").job] = []startRow{{run: 1, token: 999, at: h.at(5)}}
		}, invWfPropagate, "was decided skip but its job started"},
		{"a member scripted permanent completed", func(h *wfHistory) {
			id := *h.node(h.w, "b").job
			m := h.ev.members[id]
			m.script = wfPermanent
			h.ev.members[id] = m
		}, invWfPropagate, "scripted permanent ended ok"},
		{"a node cancelled in a workflow never cancelled", func(h *wfHistory) {
			f := h.node(h.w, "f")
			f.own, f.outcome, f.contrib = "cancel", "cancel", "c"
			e := h.node(h.w, "e")
			e.nSkip, e.nCancel = 0, 1
			h.ev.wfs[h.w].state = "cancelled"
		}, invWfPropagate, "the workflow was never cancelled"},
		{"on_success saw counts that are not the final ones", func(h *wfHistory) {
			id := *h.node(h.b, venturi.BatchOnSuccess).job
			h.ev.cbs[id][0].pending = 1
		}, invWfPropagate, "on_success saw total 1, succeeded 1, failed 0, cancelled 0, pending 1"},
		{"a member claimed after CancelWorkflow returned", func(h *wfHistory) {
			h.ev.scripts[h.w] = wfScriptRow{plan: "cancel"}
			h.ev.ops[h.w] = []opRow{{op: "cancel", at: h.at(4.5), done: h.at(4.6)}}
		}, invWfCancel, "after CancelWorkflow returned"},
		{"a spawn recorded that does not exist", func(h *wfHistory) {
			sp := h.node(h.w, "sp")
			h.ev.spawns = append(h.ev.spawns, spawnRow{job: *sp.job, run: 1, token: h.ev.jobs[*sp.job].journal[1].Token, kind: "spawn", node: "sp/c1", child: [16]byte{201}})
		}, invWfSpawn, "which does not exist"},
		{"a spawned node attached elsewhere", func(h *wfHistory) { h.node(h.w, "sp/c0").parent = "a" }, invWfSpawn, `attached to "a", not "sp"`},
		{"a spawn recorded under a token that completed nothing", func(h *wfHistory) { h.ev.spawns[0].token = 1 }, invWfSpawn, "completed no run of it"},
		{"a job node nobody enqueued", func(h *wfHistory) { h.ev.spawns = nil }, invWfSpawn, "was enqueued by no record"},
	}
	for _, c := range cases {
		h := newWfHistory()
		c.change(h)
		_, bad := wfViolations(h.ev)
		found := false
		for _, v := range bad {
			found = found || strings.HasPrefix(v, c.inv+": ") && strings.Contains(v, c.want)
		}
		if !found {
			t.Errorf("%s: want a violation of %q containing %q, got:\n  %s", c.name, c.inv, c.want, strings.Join(bad, "\n  "))
		}
	}
}

// TestWfViolationsPruned: in the retention schema, the jobs of finished members are gone
// (their journals with them); the checks that need a journal skip them, the others hold
// them to the node rows, the outputs and what the members recorded.
func TestWfViolationsPruned(t *testing.T) {
	h := newWfHistory()
	h.ev.retain = true
	for _, name := range []string{"a", "b", "m0", "c"} {
		delete(h.ev.jobs, *h.node(h.w, name).job)
	}
	st, bad := wfViolations(h.ev)
	if len(bad) != 0 {
		t.Fatalf("a clean history with pruned members: %d violations:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	if st.pruned != 4 || st.members != 12 {
		t.Errorf("pruned %d of %d members, want 4 of 12", st.pruned, st.members)
	}
	// With a's journal gone, c's early start is still seen from the node rows.
	h.ev.starts[*h.node(h.w, "c").job][0].at = h.at(3.5)
	if _, bad := wfViolations(h.ev); len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), "before b ended") {
		t.Errorf("an early start after a pruned upstream: %v", bad)
	}
	// A member job still there but not ended at quiescence.
	h = newWfHistory()
	h.ev.retain = true
	h.ev.jobs[*h.node(h.w, "e").job].state = "available"
	if _, bad := wfViolations(h.ev); len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), "is available at quiescence") {
		t.Errorf("a member not ended: %v", bad)
	}
}

// TestWfRetryAndRelease: a node decided dfail, revived when the failed node it needs was
// retried, released once it completed, has one release per arming; a node that ran under
// NeedsEnded before the retry keeps its run.
func TestWfRetryAndRelease(t *testing.T) {
	h := newWfHistory()
	ev := h.ev
	ev.scripts[h.w] = wfScriptRow{plan: "retry"}
	ev.ops[h.w] = []opRow{{op: "retry", at: h.at(4.5), done: h.at(4.5)}, {op: "retried", at: h.at(4.5), done: h.at(4.6), n: 1}}
	// b (scripted once) died at 4 and completed after the retry; c, decided dfail at 4,
	// was revived at 4.6, released at 9.5 and ran at 10.
	b := h.node(h.w, "b")
	bm := ev.members[*b.job]
	bm.script = wfOnce
	ev.members[*b.job] = bm
	bj := ev.jobs[*b.job]
	tok := bj.journal[1].Token
	bj.journal = []venturi.JournalEntry{{Event: "unblocked", At: h.at(2.8)},
		{Event: venturi.EventDead, Run: 1, Token: tok - 1000, StartedAt: h.at(2.9), At: h.at(4), Note: permanentNote},
		{Event: "retried", At: h.at(4.6)}, {Event: "unblocked", At: h.at(4.7)},
		{Event: venturi.EventCompleted, Run: 2, Token: tok, StartedAt: h.at(8.9), At: h.at(9.2)}}
	ev.starts[*b.job] = []startRow{{run: 1, token: tok - 1000, at: h.at(3)}, {run: 2, token: tok, at: h.at(9)}}
	ev.effects[*b.job][0].at = h.at(9.1)
	ev.effects[*b.job][0].run = 2
	e9 := h.at(9.15)
	b.endedAt = &e9
	cn := h.node(h.w, "c")
	cj := ev.jobs[*cn.job]
	ctok := cj.journal[1].Token
	cj.journal = []venturi.JournalEntry{{Event: "upstream_failed", At: h.at(4)}, {Event: "revived", At: h.at(4.6)},
		{Event: "unblocked", At: h.at(9.5)}, {Event: venturi.EventCompleted, Run: 1, Token: ctok, StartedAt: h.at(9.6), At: h.at(10.5)}}
	ev.starts[*cn.job][0].at = h.at(10)
	ev.effects[*cn.job][0].at = h.at(10.4)
	// What needs c ran after it.
	for _, name := range []string{"e"} {
		ev.starts[*h.node(h.w, name).job][0].at = h.at(11)
	}
	if _, bad := wfViolations(ev); len(bad) != 0 {
		t.Fatalf("a retried workflow: %d violations:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	// c started before the retried b completed: an early start.
	ev.starts[*cn.job][0].at = h.at(8)
	if _, bad := wfViolations(ev); !strings.Contains(strings.Join(bad, "\n"), "before b ended") {
		t.Errorf("a start between the retry and the end: %v", bad)
	}
	// Without a recorded retry, b scripted once must not complete.
	ev.starts[*cn.job][0].at = h.at(10)
	ev.ops[h.w] = nil
	if _, bad := wfViolations(ev); !strings.Contains(strings.Join(bad, "\n"), "scripted once ended ok") {
		t.Errorf("a once member completed without a retry: %v", bad)
	}
}

// TestWfDecide holds the decision table to venturi's (venturi_workflow_decide, the
// model's decideByDeps).
func TestWfDecide(t *testing.T) {
	cases := []struct {
		policy int
		x      recount
		want   string
	}{
		{0, recount{}, "release"}, // a root
		{0, recount{nDeps: 2, nFail: 1, waiting: 1}, "dfail"},
		{0, recount{nDeps: 2, nCancel: 1, waiting: 1}, "dcancel"},
		{0, recount{nDeps: 2, waiting: 1}, ""},
		{0, recount{nDeps: 2, nSkip: 2}, "skip"},
		{0, recount{nDeps: 2, nSkip: 1}, "release"},
		{1, recount{nDeps: 2, nFail: 1, waiting: 1}, ""},
		{1, recount{nDeps: 2, nFail: 1, nCancel: 1}, "release"},
		{1, recount{nDeps: 1, nSkip: 1}, "skip"},
		{2, recount{nDeps: 2, nFail: 1, waiting: 1}, "release"},
		{2, recount{nDeps: 2, waiting: 1}, ""},
		{2, recount{nDeps: 2, nCancel: 1}, "skip"},
	}
	for _, c := range cases {
		if got := wfDecide(c.policy, &c.x); got != c.want {
			t.Errorf("policy %d %+v: %q, want %q", c.policy, c.x, got, c.want)
		}
	}
	for _, c := range []struct {
		own                  string
		holds, hFail, hCanc  int
		contrib, outcomeWant string
	}{
		{"", 0, 0, 0, "w", ""}, {"ok", 1, 0, 0, "w", ""}, {"ok", 1, 1, 0, "x", ""}, {"fail", 1, 0, 0, "x", ""},
		{"ok", 0, 0, 0, "s", "ok"}, {"ok", 0, 1, 0, "f", "fail"}, {"ok", 0, 0, 1, "c", "cancel"}, {"skip", 0, 0, 0, "k", "skip"},
		{"dcancel", 0, 0, 0, "c", "dcancel"}, {"dfail", 0, 0, 1, "f", "dfail"},
	} {
		if got := wfContrib(c.own, c.holds, c.hFail, c.hCanc); got != c.contrib {
			t.Errorf("contrib(%q, %d, %d, %d) = %q, want %q", c.own, c.holds, c.hFail, c.hCanc, got, c.contrib)
		}
		if c.outcomeWant != "" {
			if got := wfOutcome(c.own, c.hFail, c.hCanc); got != c.outcomeWant {
				t.Errorf("outcome(%q, %d, %d) = %q, want %q", c.own, c.hFail, c.hCanc, got, c.outcomeWant)
			}
		}
	}
}

// TestChunkViolations feeds the chunk check the items of three calls: one that returned
// nil (an item completed through CompleteTx, one left unset, one failed permanently), one
// that panicked (its unset item failed, its completed item kept), and the unset item's
// next run; then histories that break it.
func TestChunkViolations(t *testing.T) {
	id := func(n byte) [16]byte { return [16]byte{n} }
	build := func() ([]chunkItemRow, []*jobRow, map[[16]byte][]effectRow) {
		items := []chunkItemRow{
			{call: "A", job: id(1), run: 1, token: 11, size: 3, set: chunkOK},
			{call: "A", job: id(2), run: 1, token: 21, size: 3, set: chunkUnset},
			{call: "A", job: id(3), run: 1, token: 31, size: 3, set: chunkFail},
			{call: "B", job: id(4), run: 1, token: 41, size: 2, set: chunkUnset, panic: true},
			{call: "B", job: id(5), run: 2, token: 51, size: 2, set: chunkOK, panic: true},
			{call: "C", job: id(4), run: 2, token: 42, size: 1, set: chunkUnset},
		}
		jobs := []*jobRow{
			{id: id(1), journal: []venturi.JournalEntry{{Event: venturi.EventCompleted, Run: 1, Token: 11}}},
			{id: id(2), journal: []venturi.JournalEntry{{Event: venturi.EventCompleted, Run: 1, Token: 21}}},
			{id: id(3), journal: []venturi.JournalEntry{{Event: venturi.EventDead, Run: 1, Token: 31, Note: permanentNote}}},
			{id: id(4), journal: []venturi.JournalEntry{{Event: venturi.EventFailed, Run: 1, Token: 41, Note: chunkPanicNote + "\ngoroutine 1"},
				{Event: venturi.EventCompleted, Run: 2, Token: 42}}},
			{id: id(5), journal: []venturi.JournalEntry{{Event: venturi.EventAbandoned, Run: 1, Token: 50},
				{Event: venturi.EventCompleted, Run: 2, Token: 51}}},
		}
		effects := map[[16]byte][]effectRow{
			id(1): {{run: 1, token: 11, outcome: "completed"}},
			id(5): {{run: 2, token: 51, outcome: "completed"}},
		}
		return items, jobs, effects
	}
	items, jobs, effects := build()
	st, bad := chunkViolations(items, jobs, effects, false)
	if len(bad) != 0 {
		t.Fatalf("clean chunks: %v", bad)
	}
	if st.calls != 3 || st.items != 6 || st.panics != 1 || st.panicFailed != 1 || st.unsetDone != 2 || st.maxSize != 3 {
		t.Errorf("stats %+v", st)
	}
	cases := []struct {
		name   string
		change func(items *[]chunkItemRow, jobs []*jobRow, effects map[[16]byte][]effectRow)
		want   string
	}{
		{"an unset item completed although its call panicked", func(_ *[]chunkItemRow, jobs []*jobRow, _ map[[16]byte][]effectRow) {
			jobs[3].journal[0] = venturi.JournalEntry{Event: venturi.EventCompleted, Run: 1, Token: 41}
		}, `given "unset" by call B (panic true), ended completed`},
		{"an item given ok completed without its effect", func(_ *[]chunkItemRow, _ []*jobRow, effects map[[16]byte][]effectRow) {
			delete(effects, id(1))
		}, "completed with 0 completion effects, want 1"},
		{"an unset item completed with an effect", func(_ *[]chunkItemRow, _ []*jobRow, effects map[[16]byte][]effectRow) {
			effects[id(2)] = []effectRow{{run: 1, token: 21, outcome: "completed"}}
		}, "completed with 1 completion effects, want 0"},
		{"an item given fail completed", func(_ *[]chunkItemRow, jobs []*jobRow, _ map[[16]byte][]effectRow) {
			jobs[2].journal[0] = venturi.JournalEntry{Event: venturi.EventCompleted, Run: 1, Token: 31}
		}, `given "fail"`},
		{"a run ended as a handler's result with no call on record", func(items *[]chunkItemRow, _ []*jobRow, _ map[[16]byte][]effectRow) {
			*items = (*items)[1:]
		}, "no call recorded it"},
		{"a recorded item whose run never ended", func(items *[]chunkItemRow, _ []*jobRow, _ map[[16]byte][]effectRow) {
			*items = append(*items, chunkItemRow{call: "D", job: id(6), run: 1, token: 61, size: 1, set: chunkOK})
		}, "has no end in its journal"},
		{"an item in two calls", func(items *[]chunkItemRow, _ []*jobRow, _ map[[16]byte][]effectRow) {
			*items = append(*items, chunkItemRow{call: "E", job: id(1), run: 1, token: 11, size: 1, set: chunkOK})
		}, "an item of two calls"},
		{"a call larger than the limit", func(items *[]chunkItemRow, _ []*jobRow, _ map[[16]byte][]effectRow) {
			for i := range *items {
				if (*items)[i].call == "A" {
					(*items)[i].size = chunkSize + 1
				}
			}
		}, "held 5 items"},
	}
	for _, c := range cases {
		items, jobs, effects := build()
		c.change(&items, jobs, effects)
		_, bad := chunkViolations(items, jobs, effects, false)
		if !strings.Contains(strings.Join(bad, "\n"), c.want) {
			t.Errorf("%s: want a violation containing %q, got %v", c.name, c.want, bad)
		}
	}
}

// TestRetainBoundaries: the retention workflows straddle the minute boundaries in the
// arrival window (at least 12 s away), and none when it holds none.
func TestRetainBoundaries(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 50, 0, time.UTC)
	got := retainBoundaries(now, 70*time.Second)
	if len(got) != 1 || !got[0].Equal(time.Date(2026, 1, 1, 12, 2, 0, 0, time.UTC)) {
		t.Errorf("70s from 12:00:50 (12:01 is too close): %v", got)
	}
	got = retainBoundaries(time.Date(2026, 1, 1, 12, 0, 40, 0, time.UTC), 70*time.Second)
	if len(got) != 1 || !got[0].Equal(time.Date(2026, 1, 1, 12, 1, 0, 0, time.UTC)) {
		t.Errorf("70s from 12:00:40: %v", got)
	}
	if got := retainBoundaries(time.Date(2026, 1, 1, 12, 0, 5, 0, time.UTC), 14*time.Second); len(got) != 1 || !got[0].IsZero() {
		t.Errorf("14s from 12:00:05: %v, want none", got)
	}
	if got := retainBoundaries(now, 260*time.Second); len(got) != 4 {
		t.Errorf("260s: %v, want 4", got)
	}
}

// TestWfSpawnedAfterTheStart: a node that needs a spawner may start after an end of the
// spawner and before the children of a later run of it (the first run failed, the workflow
// was retried): they did not exist when it started. Children that existed are waited for.
func TestWfSpawnedAfterTheStart(t *testing.T) {
	h := newWfHistory()
	h.ev.starts[*h.node(h.w, "t").job][0].at = h.at(6)
	h.node(h.w, "sp/c0").createdAt = h.at(6.2) // spawned by a run after t started
	if _, bad := wfViolations(h.ev); len(bad) != 0 {
		t.Fatalf("children spawned after the start: %d violations:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	h.node(h.w, "sp/c0").createdAt = h.at(5.9) // existed when t started
	if _, bad := wfViolations(h.ev); len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), "before sp/c0 ended") {
		t.Fatalf("a child that existed at the start: violations %v, want t's early start", bad)
	}
}
