// Package workflowmodel is the reference model of a workflow's readiness rules: which nodes
// of a graph of jobs may start, which can no longer run and end decided, and what each
// node's outcome is, given the facts the queue records (how each run ended, which groups
// are sealed, whether the workflow was asked to cancel).
//
// The model recomputes everything from those facts on every [Flow.Settle], in one pass
// over the graph; it is written to be read and trusted, not to be fast. The engine in
// the database keeps the same answers as counters updated by every transition, and its
// tests compare the two on random graphs and random histories.
//
// # Nodes
//
// A node is a job or a group. A job node names the nodes it needs and a [Policy]; a
// group is a barrier whose members are attached to it. A job may also have nodes
// attached to it: the nodes its run spawned. A node's outcome propagates to the nodes
// that need it once its own outcome is known and every node attached to it has
// propagated, so what needs a group or a spawner waits for all of it.
//
// # Outcomes
//
// A job's own outcome comes from its run ([OK], [Fail], [Cancel], [Del]) or is decided
// by the rules when its run can no longer happen ([DFail]: something it needs failed;
// [DCancel]: something it needs was cancelled; [Skip]: its policy cannot apply; [Cancel]
// as well when the workflow is cancelled). A sealed group's own outcome is [OK]. The
// propagated outcome aggregates a node's own outcome with its attachments': a failure
// anywhere in it wins, then its own outcome when that is not a success, then a
// cancellation of an attachment, else [OK].
//
// A failure is known early: a node whose own outcome is a failure, or one of whose
// attachments' failure is known, counts as failed for the nodes that need it before it
// propagates, so a [NeedsFailure] compensation starts at the first failure and a
// [Needs] node is decided [DFail] at once. Since a failure wins the aggregate, the node
// propagates a failure when it ends: the early count never disagrees with the final one.
package workflowmodel

import (
	"errors"
	"fmt"
	"slices"
)

// Errors the model refuses with.
var (
	ErrInvalid  = errors.New("workflowmodel: invalid graph")
	ErrFinished = errors.New("workflowmodel: the workflow has finished")
	ErrState    = errors.New("workflowmodel: the node is not in a state that allows this")
)

// Node is one node's facts and, after Settle, what the rules derive from them.
type Node struct {
	Name   string
	Group  bool
	Policy Policy
	Deps   []string // what it needs
	Parent string   // the group or spawner it is attached to ("" none)

	// Facts.
	run      Outcome // the job's run outcome; None while blocked or released
	released bool
	sealed   bool // groups

	// Derived by Settle.
	State    State
	Own      Outcome // its own outcome (run or decision)
	Outcome  Outcome // propagated outcome; None until propagated
	FailSeen bool    // its failure (or an attachment's) is known

	// The counters the database keeps, as recomputed here.
	NDeps, Waiting, NFail, NCancel, NSkip int // over Deps
	Holds, HFail, HCancel                 int // over the attached nodes

	attached []string
}

// Flow is a workflow's graph and facts.
type Flow struct {
	FailFast bool

	nodes     map[string]*Node
	order     []string // insertion order
	cancel    bool     // a cancel was requested (CancelFlow, or fail-fast)
	cancelled bool     // CancelFlow ran (not fail-fast)
	failFast  bool     // fail-fast tripped
	settled   bool
}

// New returns an empty workflow.
func New(failFast bool) *Flow {
	return &Flow{FailFast: failFast, nodes: map[string]*Node{}}
}

// Node returns the node named name, or nil.
func (f *Flow) Node(name string) *Node { return f.nodes[name] }

// Names returns the nodes' names in the order they were added.
func (f *Flow) Names() []string { return slices.Clone(f.order) }

// AddJob adds a job node that needs deps by policy, attached to parent ("" for none):
// a group that is not sealed, or a job that has not propagated (a spawn). A job with no
// deps is a root and must have the Needs policy.
func (f *Flow) AddJob(name string, policy Policy, deps []string, parent string) error {
	return f.add(&Node{Name: name, Policy: policy, Deps: slices.Clone(deps), Parent: parent})
}

// AddGroup adds a group, sealed or open, attached to parent ("" for none).
func (f *Flow) AddGroup(name string, sealed bool, parent string) error {
	return f.add(&Node{Name: name, Group: true, Parent: parent, sealed: sealed})
}

func (f *Flow) add(n *Node) error {
	if f.settled && f.Finished() {
		return ErrFinished
	}
	if n.Name == "" || f.nodes[n.Name] != nil {
		return fmt.Errorf("%w: node %q is empty or exists", ErrInvalid, n.Name)
	}
	if len(n.Deps) == 0 && n.Policy != Needs {
		return fmt.Errorf("%w: node %q has policy %v and needs nothing", ErrInvalid, n.Name, n.Policy)
	}
	seen := map[string]bool{}
	for _, d := range n.Deps {
		if f.nodes[d] == nil || seen[d] {
			return fmt.Errorf("%w: node %q needs %q, unknown or twice", ErrInvalid, n.Name, d)
		}
		seen[d] = true
	}
	if n.Parent != "" {
		p := f.nodes[n.Parent]
		switch {
		case p == nil:
			return fmt.Errorf("%w: node %q is attached to unknown %q", ErrInvalid, n.Name, n.Parent)
		case p.Outcome != None:
			return fmt.Errorf("%w: node %q is attached to %q, which has propagated", ErrState, n.Name, n.Parent)
		case !p.Group && (p.run != None || !p.released):
			return fmt.Errorf("%w: node %q is spawned by %q, which is not running", ErrState, n.Name, n.Parent)
		}
		// The new node waits on its deps, and its parent on it: a cycle when a dep
		// (or something it waits on) waits on the parent.
		if f.WaitsOn(n.Deps, n.Parent) {
			return fmt.Errorf("%w: node %q needs what waits for %q, which it is attached to", ErrInvalid, n.Name, n.Parent)
		}
	}
	f.nodes[n.Name] = n
	f.order = append(f.order, n.Name)
	if n.Parent != "" {
		p := f.nodes[n.Parent]
		p.attached = append(p.attached, n.Name)
	}
	return nil
}

// WaitsOn reports whether target is among from or what they wait on (their deps and
// attachments), transitively: a node that needs one of from cannot be attached to
// target.
func (f *Flow) WaitsOn(from []string, target string) bool {
	seen := map[string]bool{}
	stack := slices.Clone(from)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x == target {
			return true
		}
		if seen[x] {
			continue
		}
		seen[x] = true
		n := f.nodes[x]
		stack = append(stack, n.Deps...)
		stack = append(stack, n.attached...)
	}
	return false
}

// Seal seals a group: its own outcome is OK, and it propagates once its members have.
// Until then a member may still attach nodes to it (a batch member spawning into its
// batch); the queue refuses additions from outside a sealed group, the model does not.
// A finished workflow's groups are as they ended (a cancel's open group stays cancelled):
// sealing one is ErrState.
func (f *Flow) Seal(group string) error {
	n := f.nodes[group]
	if n == nil || !n.Group {
		return fmt.Errorf("%w: no group %q", ErrInvalid, group)
	}
	if f.Finished() {
		return fmt.Errorf("%w: the workflow has finished", ErrState)
	}
	n.sealed = true
	return nil
}

// End records how a job node's job ended: a run's end (OK, Fail, Cancel) for a released
// node, or a cancel or delete (Cancel, Del) of one still blocked.
func (f *Flow) End(name string, o Outcome) error {
	n := f.nodes[name]
	if n == nil || n.Group {
		return fmt.Errorf("%w: no job node %q", ErrInvalid, name)
	}
	if n.run != None || (n.State == Decided) {
		return fmt.Errorf("%w: %q has ended", ErrState, name)
	}
	switch {
	case n.released && (o == OK || o == Fail || o == Cancel || o == Del):
	case !n.released && (o == Cancel || o == Del):
	default:
		return fmt.Errorf("%w: %q (%v) cannot end %v", ErrState, name, n.State, o)
	}
	n.run = o
	// Fail-fast trips on a failure that comes while no cancel is requested: a failure
	// after a cancel (a member retried inside a cancelled workflow) did not cause it.
	if o == Fail && f.FailFast && !f.cancel {
		f.cancel, f.failFast = true, true
	}
	return nil
}

// Reopen re-opens a job node whose job ended (a retry): it is blocked again and the
// rules decide it anew. Nodes decided because of it are re-decided; nodes that ran
// keep their outcomes.
func (f *Flow) Reopen(name string) error {
	n := f.nodes[name]
	if n == nil || n.Group {
		return fmt.Errorf("%w: no job node %q", ErrInvalid, name)
	}
	if n.run == None && n.State != Decided {
		return fmt.Errorf("%w: %q has not ended", ErrState, name)
	}
	n.run, n.released = None, false
	return nil
}

// Cancel requests the workflow's cancel: no blocked node is released any more, and
// every released node that has not ended is to be stopped ([Flow.ToStop]). A finished
// workflow keeps its result: cancelling it changes nothing.
func (f *Flow) Cancel() {
	if f.Finished() {
		return
	}
	f.cancel, f.cancelled = true, true
}

// Retry clears a cancel request (CancelFlow's or fail-fast's), before nodes are
// re-opened.
func (f *Flow) Retry() { f.cancel, f.cancelled, f.failFast = false, false, false }

// CancelRequested reports whether a cancel is requested.
func (f *Flow) CancelRequested() bool { return f.cancel }

// Event is what one Settle changed for one node.
type Event struct {
	Node string
	// From and To: the node's state before and after.
	From, To State
	// Own: the node's own outcome after (for a decision).
	Own Outcome
}

// Settle derives every node's state, outcomes and counters from the facts, releases the
// blocked jobs whose policy is met, and returns what changed, in insertion order.
func (f *Flow) Settle() []Event {
	before := map[string]State{}
	for _, name := range f.order {
		before[name] = f.nodes[name].State
	}
	done := map[string]bool{}
	for _, name := range f.order {
		f.eval(name, done)
	}
	f.settled = true
	var ev []Event
	for _, name := range f.order {
		n := f.nodes[name]
		if n.State != before[name] {
			ev = append(ev, Event{Node: name, From: before[name], To: n.State, Own: n.Own})
		}
	}
	return ev
}

// eval derives node name after what it needs and what is attached to it.
func (f *Flow) eval(name string, done map[string]bool) {
	if done[name] {
		return
	}
	done[name] = true
	n := f.nodes[name]
	for _, d := range n.Deps {
		f.eval(d, done)
	}
	for _, a := range n.attached {
		f.eval(a, done)
	}
	// What it needs.
	n.NDeps, n.Waiting, n.NFail, n.NCancel, n.NSkip = len(n.Deps), 0, 0, 0, 0
	for _, dn := range n.Deps {
		d := f.nodes[dn]
		if d.Outcome == None {
			n.Waiting++
		}
		switch {
		case d.FailSeen:
			n.NFail++
		case d.Outcome != None && ClassOf(d.Outcome) == ClassCancel:
			n.NCancel++
		case d.Outcome != None && ClassOf(d.Outcome) == ClassSkip:
			n.NSkip++
		}
	}
	// Its own outcome.
	switch {
	case n.Group && n.sealed:
		n.Own, n.State = OK, Sealed
	case n.Group && f.cancel:
		n.Own, n.State = Cancel, Decided // an open group of a cancelled workflow
	case n.Group:
		n.Own, n.State = None, Blocked
	case n.run != None:
		n.Own, n.State = n.run, Ended
	case n.released:
		n.Own, n.State = None, Released
	default:
		switch d := f.decide(n); d {
		case None:
			n.Own, n.State = None, Blocked
		case OK: // release
			n.released = true
			n.Own, n.State = None, Released
		default:
			n.Own, n.State = d, Decided
		}
	}
	// Its attachments.
	n.Holds, n.HFail, n.HCancel = 0, 0, 0
	childFail := false
	for _, an := range n.attached {
		a := f.nodes[an]
		if a.Outcome == None {
			n.Holds++
		}
		switch {
		case a.FailSeen:
			n.HFail++
			childFail = true
		case a.Outcome != None && ClassOf(a.Outcome) == ClassCancel:
			n.HCancel++
		}
	}
	n.FailSeen = ClassOf(n.Own) == ClassFailure || childFail
	// Its propagated outcome.
	n.Outcome = None
	if n.Own != None && n.Holds == 0 {
		switch {
		case ClassOf(n.Own) == ClassFailure:
			n.Outcome = n.Own
		case childFail:
			n.Outcome = Fail
		case ClassOf(n.Own) != ClassSuccess:
			n.Outcome = n.Own
		case n.HCancel > 0:
			n.Outcome = Cancel
		default:
			n.Outcome = OK
		}
	}
}

// decide applies n's policy to its counters: OK to release it, None to keep it
// blocked, or the outcome it is decided with. What it needs decides first (a node that
// can no longer run because of it is dfail, dcancel or skip, cancel or not); a cancel
// of the workflow decides the nodes that could still run or wait.
func (f *Flow) decide(n *Node) Outcome {
	d := decideByDeps(n)
	if f.cancel && (d == OK || d == None) {
		return Cancel
	}
	return d
}

func decideByDeps(n *Node) Outcome {
	allSkipped := n.NDeps > 0 && n.NSkip == n.NDeps
	switch n.Policy {
	case Needs:
		switch {
		case n.NFail > 0:
			return DFail
		case n.NCancel > 0:
			return DCancel
		case n.Waiting > 0:
			return None
		case allSkipped:
			return Skip
		}
		return OK
	case NeedsEnded:
		switch {
		case n.Waiting > 0:
			return None
		case allSkipped:
			return Skip
		}
		return OK
	case NeedsFailure:
		switch {
		case n.NFail > 0:
			return OK
		case n.Waiting > 0:
			return None
		}
		return Skip
	}
	panic("workflowmodel: unknown policy")
}

// ToStop returns the released nodes whose jobs have not ended while a cancel is
// requested: the engine stops them (they end Cancel, or OK if they complete first).
func (f *Flow) ToStop() []string {
	if !f.cancel {
		return nil
	}
	var out []string
	for _, name := range f.order {
		if n := f.nodes[name]; n.State == Released {
			out = append(out, name)
		}
	}
	return out
}

// Finished reports whether every node has propagated (after Settle).
func (f *Flow) Finished() bool {
	for _, name := range f.order {
		if f.nodes[name].Outcome == None {
			return false
		}
	}
	return true
}

// Result is a workflow's final state.
type Result uint8

const (
	// ResultOpen: a node has not propagated.
	ResultOpen Result = iota
	// ResultSucceeded: every node succeeded or was skipped.
	ResultSucceeded
	// ResultFailed: a node failed, or fail-fast cancelled the rest.
	ResultFailed
	// ResultCancelled: the workflow was cancelled, or a node was.
	ResultCancelled
)

func (r Result) String() string {
	return [...]string{"open", "succeeded", "failed", "cancelled"}[r]
}

// Result returns the workflow's state (after Settle).
func (f *Flow) Result() Result {
	if !f.Finished() {
		return ResultOpen
	}
	failed, cancelled := f.failFast, f.cancelled
	for _, name := range f.order {
		switch ClassOf(f.nodes[name].Own) {
		case ClassFailure:
			failed = true
		case ClassCancel:
			cancelled = true
		}
	}
	switch {
	case failed:
		return ResultFailed
	case cancelled:
		return ResultCancelled
	}
	return ResultSucceeded
}
