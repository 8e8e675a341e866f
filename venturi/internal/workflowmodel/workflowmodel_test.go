package workflowmodel

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// state returns each named node's state and own outcome, as "name=state/own".
func states(f *Flow, names ...string) []string {
	var out []string
	for _, n := range names {
		nd := f.Node(n)
		out = append(out, fmt.Sprintf("%s=%v/%v", n, nd.State, nd.Own))
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func want(t *testing.T, f *Flow, want ...string) {
	t.Helper()
	var names []string
	for _, w := range want {
		for i := range w {
			if w[i] == '=' {
				names = append(names, w[:i])
				break
			}
		}
	}
	if got := states(f, names...); !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

// A chain a → b → c with each policy's decisions.
func TestPolicies(t *testing.T) {
	chain := func(t *testing.T, p Policy) *Flow {
		f := New(false)
		must(t, f.AddJob("a", Needs, nil, ""))
		must(t, f.AddJob("b", p, []string{"a"}, ""))
		must(t, f.AddJob("c", Needs, []string{"b"}, ""))
		f.Settle()
		want(t, f, "a=released/", "b=blocked/", "c=blocked/")
		return f
	}
	cases := []struct {
		policy Policy
		a      Outcome
		want   []string
		result Result
	}{
		{Needs, OK, []string{"b=released/", "c=blocked/"}, ResultOpen},
		{Needs, Fail, []string{"b=decided/dfail", "c=decided/dfail"}, ResultFailed},
		{Needs, Cancel, []string{"b=decided/dcancel", "c=decided/dcancel"}, ResultCancelled},
		{Needs, Del, []string{"b=decided/dcancel", "c=decided/dcancel"}, ResultCancelled},
		{NeedsEnded, OK, []string{"b=released/", "c=blocked/"}, ResultOpen},
		{NeedsEnded, Fail, []string{"b=released/", "c=blocked/"}, ResultOpen},
		{NeedsEnded, Cancel, []string{"b=released/", "c=blocked/"}, ResultOpen},
		{NeedsFailure, OK, []string{"b=decided/skip", "c=decided/skip"}, ResultSucceeded},
		{NeedsFailure, Fail, []string{"b=released/", "c=blocked/"}, ResultOpen},
		{NeedsFailure, Cancel, []string{"b=decided/skip", "c=decided/skip"}, ResultCancelled},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/%v", c.policy, c.a), func(t *testing.T) {
			f := chain(t, c.policy)
			must(t, f.End("a", c.a))
			f.Settle()
			want(t, f, c.want...)
			if r := f.Result(); r != c.result {
				t.Fatalf("result %v, want %v", r, c.result)
			}
		})
	}
}

// Skipped dependencies count as satisfied unless every one was skipped (Hatchet's rule).
func TestSkipRule(t *testing.T) {
	f := New(false)
	must(t, f.AddJob("a", Needs, nil, ""))
	must(t, f.AddJob("comp", NeedsFailure, []string{"a"}, ""))
	must(t, f.AddJob("b", Needs, nil, ""))
	must(t, f.AddJob("after-both", Needs, []string{"comp", "b"}, ""))
	must(t, f.AddJob("after-comp", Needs, []string{"comp"}, ""))
	f.Settle()
	must(t, f.End("a", OK))
	f.Settle()
	want(t, f, "comp=decided/skip", "after-comp=decided/skip", "after-both=blocked/")
	must(t, f.End("b", OK))
	f.Settle()
	want(t, f, "after-both=released/")
}

// A Needs node is decided at the first failure, before its other dependencies end; a
// NeedsEnded node waits for all of them.
func TestEagerFailure(t *testing.T) {
	f := New(false)
	must(t, f.AddJob("a", Needs, nil, ""))
	must(t, f.AddJob("b", Needs, nil, ""))
	must(t, f.AddJob("all", Needs, []string{"a", "b"}, ""))
	must(t, f.AddJob("ended", NeedsEnded, []string{"a", "b"}, ""))
	must(t, f.AddJob("comp", NeedsFailure, []string{"a", "b"}, ""))
	f.Settle()
	must(t, f.End("a", Fail))
	f.Settle()
	want(t, f, "all=decided/dfail", "ended=blocked/", "comp=released/")
	must(t, f.End("b", OK))
	f.Settle()
	want(t, f, "ended=released/")
}

// A group is a barrier: what needs it waits for every member; an empty sealed group is
// satisfied at once.
func TestGroups(t *testing.T) {
	t.Run("members", func(t *testing.T) {
		f := New(false)
		must(t, f.AddGroup("rows", false, ""))
		must(t, f.AddJob("total", Needs, []string{"rows"}, ""))
		for i := range 3 {
			must(t, f.AddJob(fmt.Sprint("row-", i), Needs, nil, "rows"))
		}
		f.Settle()
		want(t, f, "rows=blocked/", "row-0=released/", "total=blocked/")
		for i := range 3 {
			must(t, f.End(fmt.Sprint("row-", i), OK))
		}
		f.Settle()
		want(t, f, "total=blocked/") // not sealed
		must(t, f.Seal("rows"))
		f.Settle()
		want(t, f, "rows=sealed/ok", "total=released/")
	})
	t.Run("empty", func(t *testing.T) {
		f := New(false)
		must(t, f.AddGroup("rows", true, ""))
		must(t, f.AddJob("total", Needs, []string{"rows"}, ""))
		must(t, f.AddJob("comp", NeedsFailure, []string{"rows"}, ""))
		f.Settle()
		want(t, f, "rows=sealed/ok", "total=released/", "comp=decided/skip")
	})
	t.Run("a member fails", func(t *testing.T) {
		f := New(false)
		must(t, f.AddGroup("rows", true, ""))
		must(t, f.AddJob("ok", Needs, []string{"rows"}, ""))
		must(t, f.AddJob("ended", NeedsEnded, []string{"rows"}, ""))
		must(t, f.AddJob("first-failure", NeedsFailure, []string{"rows"}, ""))
		must(t, f.AddJob("r1", Needs, nil, "rows"))
		must(t, f.AddJob("r2", Needs, nil, "rows"))
		f.Settle()
		must(t, f.End("r1", Fail))
		f.Settle()
		// The failure is known before the group propagates (r2 still runs).
		want(t, f, "ok=decided/dfail", "ended=blocked/", "first-failure=released/")
		must(t, f.End("r2", OK))
		f.Settle()
		want(t, f, "ended=released/")
		if o := f.Node("rows").Outcome; o != Fail {
			t.Fatalf("group outcome %v, want fail", o)
		}
	})
	t.Run("a member cancelled", func(t *testing.T) {
		f := New(false)
		must(t, f.AddGroup("rows", true, ""))
		must(t, f.AddJob("ok", Needs, []string{"rows"}, ""))
		must(t, f.AddJob("r1", Needs, nil, "rows"))
		f.Settle()
		must(t, f.End("r1", Cancel))
		f.Settle()
		want(t, f, "ok=decided/dcancel")
	})
}

// A spawner's dependents wait for everything it spawned; spawning nothing propagates on
// the spawner's own end.
func TestSpawn(t *testing.T) {
	f := New(false)
	must(t, f.AddJob("split", Needs, nil, ""))
	must(t, f.AddJob("index", Needs, []string{"split"}, ""))
	f.Settle()
	must(t, f.AddJob("part-1", Needs, nil, "split"))
	must(t, f.AddJob("part-2", Needs, []string{"part-1"}, "split"))
	must(t, f.End("split", OK))
	f.Settle()
	want(t, f, "split=ended/ok", "part-1=released/", "part-2=blocked/", "index=blocked/")
	must(t, f.End("part-1", OK))
	f.Settle()
	must(t, f.End("part-2", OK))
	f.Settle()
	want(t, f, "index=released/")

	// A spawn may not need its spawner or what waits for it.
	if err := f.AddJob("loop", Needs, []string{"index"}, "index"); !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrState) {
		t.Fatalf("spawn needing its spawner: %v", err)
	}
	g := New(false)
	must(t, g.AddGroup("batch", false, ""))
	must(t, g.AddJob("m", Needs, nil, "batch"))
	g.Settle()
	if err := g.AddJob("c", Needs, []string{"batch"}, "m"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("spawn needing its spawner's group: %v, want ErrInvalid", err)
	}
	// Spawning into a group from a member, after the seal, until the group propagates.
	must(t, g.Seal("batch"))
	must(t, g.AddJob("m2", Needs, nil, "batch"))
	g.Settle()
	want(t, g, "m2=released/", "batch=sealed/ok")
	if o := g.Node("batch").Outcome; o != None {
		t.Fatalf("group propagated %v with members running", o)
	}
}

// Cancelling a workflow decides every blocked node, asks released ones to stop, and
// leaves nothing waiting; a retry reopens what the cancel decided.
func TestCancelAndRetry(t *testing.T) {
	f := New(false)
	must(t, f.AddJob("a", Needs, nil, ""))
	must(t, f.AddJob("b", Needs, []string{"a"}, ""))
	must(t, f.AddGroup("open", false, ""))
	must(t, f.AddJob("after", NeedsEnded, []string{"open"}, ""))
	f.Settle()
	f.Cancel()
	f.Settle()
	want(t, f, "a=released/", "b=decided/cancel", "open=decided/cancel", "after=decided/cancel")
	if got := f.ToStop(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("to stop %v", got)
	}
	must(t, f.End("a", Cancel))
	f.Settle()
	if !f.Finished() || f.Result() != ResultCancelled {
		t.Fatalf("finished %v, result %v", f.Finished(), f.Result())
	}
	if err := f.AddJob("late", Needs, nil, ""); !errors.Is(err, ErrFinished) {
		t.Fatalf("adding to a finished workflow: %v", err)
	}

	f.Retry()
	must(t, f.Reopen("a"))
	f.Settle()
	want(t, f, "a=released/", "b=blocked/", "open=blocked/", "after=blocked/")
	must(t, f.End("a", OK))
	must(t, f.Seal("open"))
	f.Settle()
	want(t, f, "b=released/", "after=released/")
}

// Fail-fast: the first failure cancels the rest, and the workflow ends failed.
func TestFailFast(t *testing.T) {
	f := New(true)
	must(t, f.AddJob("a", Needs, nil, ""))
	must(t, f.AddJob("b", Needs, nil, ""))
	must(t, f.AddJob("c", NeedsEnded, []string{"b"}, ""))
	f.Settle()
	must(t, f.End("a", Fail))
	f.Settle()
	want(t, f, "c=decided/cancel")
	if got := f.ToStop(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("to stop %v", got)
	}
	must(t, f.End("b", OK)) // completion wins over a stop request
	f.Settle()
	if f.Result() != ResultFailed {
		t.Fatalf("result %v", f.Result())
	}
}

// A failure after a cancel did not cause the cancel: fail-fast does not trip, so a member
// retried inside the cancelled workflow and cancelled again leaves it cancelled, not
// failed. Cancelling a finished workflow keeps its result.
func TestFailureAfterCancel(t *testing.T) {
	f := New(true)
	must(t, f.AddJob("a", Needs, nil, ""))
	must(t, f.AddJob("b", Needs, nil, ""))
	f.Settle()
	f.Cancel()
	must(t, f.End("a", Fail))
	must(t, f.Reopen("a")) // an operator's retry of one member: the cancel stays
	f.Settle()
	want(t, f, "a=decided/cancel")
	must(t, f.End("b", Cancel))
	f.Settle()
	if r := f.Result(); r != ResultCancelled {
		t.Fatalf("result %v, want cancelled", r)
	}

	g := New(false)
	must(t, g.AddJob("a", Needs, nil, ""))
	g.Settle()
	must(t, g.End("a", OK))
	g.Settle()
	g.Cancel()
	g.Settle()
	if r := g.Result(); r != ResultSucceeded || g.CancelRequested() {
		t.Fatalf("cancelling a finished workflow: result %v, cancel requested %v", r, g.CancelRequested())
	}
}

// Retrying a failed node revives what was decided because of it; what ran keeps its
// outcome.
func TestReopenRevives(t *testing.T) {
	f := New(false)
	must(t, f.AddJob("a", Needs, nil, ""))
	must(t, f.AddJob("b", Needs, []string{"a"}, ""))
	must(t, f.AddJob("c", Needs, []string{"b"}, ""))
	must(t, f.AddJob("report", NeedsEnded, []string{"a"}, ""))
	f.Settle()
	must(t, f.End("a", Fail))
	f.Settle()
	must(t, f.End("report", OK))
	f.Settle()
	want(t, f, "b=decided/dfail", "c=decided/dfail", "report=ended/ok")
	if !f.Finished() || f.Result() != ResultFailed {
		t.Fatalf("finished %v result %v", f.Finished(), f.Result())
	}
	must(t, f.Reopen("a"))
	ev := f.Settle()
	want(t, f, "a=released/", "b=blocked/", "c=blocked/", "report=ended/ok")
	if len(ev) != 3 {
		t.Fatalf("events %+v", ev)
	}
	must(t, f.End("a", OK))
	f.Settle()
	want(t, f, "b=released/")
}

// Cancel and Del of a blocked node are facts like a run's end.
func TestEndBlocked(t *testing.T) {
	f := New(false)
	must(t, f.AddJob("a", Needs, nil, ""))
	must(t, f.AddJob("b", Needs, []string{"a"}, ""))
	must(t, f.AddJob("c", NeedsEnded, []string{"b"}, ""))
	f.Settle()
	if err := f.End("b", OK); !errors.Is(err, ErrState) {
		t.Fatalf("a blocked node completing: %v", err)
	}
	must(t, f.End("b", Del))
	f.Settle()
	want(t, f, "b=ended/del", "c=released/")
}

// Random graphs and histories: whatever ends how, once every released job has ended the
// workflow has finished (nothing waits forever), no node was released before its policy
// held, and the counters agree with a count of the dependencies' outcomes.
func TestRandomHistoriesFinish(t *testing.T) {
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 7))
		f := randomFlow(r)
		released := map[string]bool{}
		check := func(ev []Event) {
			for _, e := range ev {
				if e.To == Released && !released[e.Node] {
					released[e.Node] = true
					checkReleasable(t, seed, f, e.Node)
				}
			}
		}
		check(f.Settle())
		for step := 0; ; step++ {
			if step > 10000 {
				t.Fatalf("seed %d: no progress", seed)
			}
			var running []string
			for _, n := range f.Names() {
				if f.Node(n).State == Released {
					running = append(running, n)
				}
			}
			if len(running) == 0 {
				// Seal the groups left open (a finished workflow's stay as they ended);
				// then nothing may be left.
				sealed := false
				for _, n := range f.Names() {
					if nd := f.Node(n); nd.Group && !nd.sealed && !f.Finished() {
						must(t, f.Seal(n))
						sealed = true
					}
				}
				check(f.Settle())
				if sealed {
					continue
				}
				if !f.Finished() {
					t.Fatalf("seed %d: stuck: %v", seed, states(f, f.Names()...))
				}
				break
			}
			n := running[r.IntN(len(running))]
			switch x := r.IntN(20); {
			case x == 0 && !f.CancelRequested():
				f.Cancel()
			case x < 3:
				// Spawn a child that needs an existing node that does not wait on n.
				child := fmt.Sprintf("%s.s%d", n, step)
				var deps []string
				if names := f.Names(); r.IntN(2) == 0 {
					if d := names[r.IntN(len(names))]; !f.WaitsOn([]string{d}, n) {
						deps = []string{d}
					}
				}
				p := Needs
				if len(deps) > 0 {
					p = Policy(r.IntN(3))
				}
				must(t, f.AddJob(child, p, deps, n))
			default:
				must(t, f.End(n, []Outcome{OK, OK, OK, Fail, Cancel}[r.IntN(5)]))
			}
			check(f.Settle())
			checkCounters(t, seed, f)
		}
	}
}

// checkReleasable fails when node name's policy does not hold on its dependencies'
// outcomes at its release.
func checkReleasable(t *testing.T, seed uint64, f *Flow, name string) {
	t.Helper()
	n := f.Node(name)
	if f.CancelRequested() {
		t.Fatalf("seed %d: %s released while the workflow cancels", seed, name)
	}
	var ok, failed, ended, skipped int
	for _, d := range n.Deps {
		dn := f.Node(d)
		if dn.FailSeen {
			failed++
		}
		if dn.Outcome != None {
			ended++
			switch ClassOf(dn.Outcome) {
			case ClassSuccess:
				ok++
			case ClassSkip:
				skipped++
			}
		}
	}
	all := len(n.Deps)
	var holds bool
	switch n.Policy {
	case Needs:
		holds = ended == all && ok+skipped == all && (all == 0 || skipped < all)
	case NeedsEnded:
		holds = ended == all && (all == 0 || skipped < all)
	case NeedsFailure:
		holds = failed > 0
	}
	if !holds {
		t.Fatalf("seed %d: %s (%v) released with %d of %d deps ended, %d ok, %d failed, %d skipped",
			seed, name, n.Policy, ended, all, ok, failed, skipped)
	}
}

// checkCounters recounts every node's counters from its dependencies and attachments.
func checkCounters(t *testing.T, seed uint64, f *Flow) {
	t.Helper()
	for _, name := range f.Names() {
		n := f.Node(name)
		waiting := 0
		for _, d := range n.Deps {
			if f.Node(d).Outcome == None {
				waiting++
			}
		}
		holds := 0
		for _, a := range n.attached {
			if f.Node(a).Outcome == None {
				holds++
			}
		}
		if n.Waiting != waiting || n.Holds != holds || n.NDeps != len(n.Deps) {
			t.Fatalf("seed %d: %s counters waiting %d holds %d, recount %d %d", seed, name, n.Waiting, n.Holds, waiting, holds)
		}
		if n.Outcome != None && (n.Own == None || n.Holds > 0) {
			t.Fatalf("seed %d: %s propagated %v with own %v and %d held", seed, name, n.Outcome, n.Own, n.Holds)
		}
		if n.FailSeen && n.Outcome != None && ClassOf(n.Outcome) != ClassFailure {
			t.Fatalf("seed %d: %s: failure seen early, propagated %v", seed, name, n.Outcome)
		}
	}
}

// randomFlow builds a random DAG of 2–30 nodes: jobs of every policy, a group or two
// with members (some open), chains, diamonds and fan-ins.
func randomFlow(r *rand.Rand) *Flow {
	f := New(r.IntN(8) == 0)
	n := 2 + r.IntN(29)
	var names []string
	for i := range n {
		name := fmt.Sprint("n", i)
		if len(names) > 0 && r.IntN(8) == 0 {
			if err := f.AddGroup(name, r.IntN(2) == 0, ""); err != nil {
				panic(err)
			}
			names = append(names, name)
			continue
		}
		var deps []string
		for _, d := range names {
			if r.IntN(len(names)+1) < 2 {
				deps = append(deps, d)
			}
		}
		p := Needs
		if len(deps) > 0 {
			p = Policy(r.IntN(3))
		}
		parent := ""
		for _, g := range names {
			if gn := f.Node(g); gn.Group && r.IntN(3) == 0 && !f.WaitsOn(deps, g) {
				parent = g
				break
			}
		}
		if err := f.AddJob(name, p, deps, parent); err != nil {
			panic(err)
		}
		names = append(names, name)
	}
	return f
}
