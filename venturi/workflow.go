package venturi

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Workflows: graphs of jobs that wait for one another (see the README, "Workflows").

// Limits of one workflow enqueue.
const (
	// MaxWorkflowNodes is the most nodes one EnqueueWorkflow writes.
	MaxWorkflowNodes = 10_000
	// MaxWorkflowEdges is the most dependencies its nodes name in all.
	MaxWorkflowEdges = 100_000
	// MaxNodeNameBytes bounds a node's name.
	MaxNodeNameBytes = 128
	// MaxWorkflowKeyBytes bounds a workflow's key.
	MaxWorkflowKeyBytes = 512
)

// Errors of the workflow calls.
var (
	// ErrWorkflowInvalid is a graph the queue refuses: a node named twice or not at all, a
	// dependency on an unknown node, a cycle, a policy mixed on one node, a compensation
	// that needs nothing. Nothing is written.
	ErrWorkflowInvalid = errors.New("venturi: invalid workflow")
	// ErrWorkflowFinished: the workflow has finished (or does not exist); nothing can be
	// added to it.
	ErrWorkflowFinished = errors.New("venturi: the workflow has finished")
	// ErrWorkflowNotFound: no workflow has the ID.
	ErrWorkflowNotFound = errors.New("venturi: workflow not found")

	// errNotOpenGroup: a node added to a running workflow joins a node that is not an
	// open group (a sealed batch's members, for AddToBatch).
	errNotOpenGroup = errors.New("not an open group")
)

// Policy is what a node needs of the nodes it depends on.
type Policy int16

// Policies.
const (
	// PolicySucceeded: every dependency completed (Needs). A dependency that failed or was
	// cancelled decides the node: it ends cancelled without running (upstream_failed,
	// upstream_cancelled).
	PolicySucceeded Policy = iota
	// PolicyEnded: every dependency ended, whatever its outcome (NeedsEnded).
	PolicyEnded
	// PolicyFailed: a dependency failed (NeedsFailure): a compensation, released at the
	// first failure and skipped when none fails.
	PolicyFailed
)

// String returns the policy's name.
func (p Policy) String() string {
	switch p {
	case PolicySucceeded:
		return "succeeded"
	case PolicyEnded:
		return "ended"
	case PolicyFailed:
		return "failed"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Node names a node of a workflow, for the nodes that need it.
type Node struct {
	name string
}

// Name returns the node's name.
func (n Node) Name() string { return n.name }

// NodeNamed names a node already in a running workflow, for the nodes added to it with
// [Queue.AddToWorkflow] that need it or join it (an open group).
func NodeNamed(name string) Node { return Node{name: name} }

// NodeOption configures a node added to a workflow.
type NodeOption interface {
	applyNode(*wfNode)
}

type nodeOptionFunc func(*wfNode)

func (f nodeOptionFunc) applyNode(n *wfNode) { f(n) }

// Needs makes the node wait until every one of nodes completed; a failure or cancel among
// them cancels it without a run.
func Needs(nodes ...Node) NodeOption { return needs(PolicySucceeded, nodes) }

// NeedsEnded makes the node wait until every one of nodes ended, whatever its outcome.
func NeedsEnded(nodes ...Node) NodeOption { return needs(PolicyEnded, nodes) }

// NeedsFailure makes the node a compensation: it runs as soon as one of nodes fails, and
// is skipped when none does.
func NeedsFailure(nodes ...Node) NodeOption { return needs(PolicyFailed, nodes) }

func needs(p Policy, nodes []Node) NodeOption {
	return nodeOptionFunc(func(n *wfNode) {
		if n.hasPolicy && n.policy != p {
			n.err = fmt.Errorf("%w: node %q mixes policies %v and %v", ErrWorkflowInvalid, n.name, n.policy, p)
		}
		n.hasPolicy, n.policy = true, p
		for _, d := range nodes {
			n.deps = append(n.deps, d.name)
		}
	})
}

// In attaches the node to a group: what needs the group waits for it.
func In(group Node) NodeOption {
	return nodeOptionFunc(func(n *wfNode) { n.parent = group.name })
}

// DelayAfterDeps makes the node due d after what it needs allows it to run.
func DelayAfterDeps(d time.Duration) NodeOption {
	return nodeOptionFunc(func(n *wfNode) { n.delay = d })
}

// With passes enqueue options to the node's job (At, After, OnQueue, WithMeta,
// WithEvents). A node's job is never merged: its task's dedup key is ignored.
func With(opts ...EnqueueOption) NodeOption {
	return nodeOptionFunc(func(n *wfNode) { n.opts = append(n.opts, opts...) })
}

// WorkflowOption configures a workflow.
type WorkflowOption interface {
	applyWorkflow(*Workflow)
}

type workflowOptionFunc func(*Workflow)

func (f workflowOptionFunc) applyWorkflow(w *Workflow) { f(w) }

// WorkflowKey makes the enqueue idempotent: while a workflow with the key is open,
// enqueuing another returns it (ActionKept) and writes nothing.
func WorkflowKey(key string) WorkflowOption {
	return workflowOptionFunc(func(w *Workflow) { w.key = key })
}

// FailFast makes the first node that fails cancel the rest of the workflow: blocked nodes
// end cancelled, released ones are cancelled (a running one is asked to stop). The
// workflow ends failed.
func FailFast() WorkflowOption {
	return workflowOptionFunc(func(w *Workflow) { w.failFast = true })
}

// Workflow is a graph of tasks enqueued together: each node is a job that waits for the
// nodes it needs, or a group that waits for its members. Build it with NewWorkflow, Add
// and Group, then enqueue it with [Queue.EnqueueWorkflow]. A Workflow is not safe for
// concurrent use; the first error of Add or Group is returned by the enqueue.
type Workflow struct {
	name     string
	key      string
	failFast bool
	nodes    []*wfNode
	byName   map[string]*wfNode
	err      error
}

type wfNode struct {
	name      string
	task      Task // nil: a group
	open      bool // a group that stays open until SealGroup
	hasPolicy bool
	policy    Policy
	deps      []string
	parent    string
	delay     time.Duration
	opts      []EnqueueOption
	err       error
}

// NewWorkflow returns an empty workflow named name (at most 256 bytes, for people).
func NewWorkflow(name string, opts ...WorkflowOption) *Workflow {
	w := &Workflow{name: name, byName: map[string]*wfNode{}}
	for _, o := range opts {
		if o != nil {
			o.applyWorkflow(w)
		}
	}
	return w
}

// Add adds a job node named name (1 to MaxNodeNameBytes bytes, unique in the workflow)
// that runs t once what opts say it needs allows; a node that needs nothing is a root and
// is due at once (or at its At or After).
func (w *Workflow) Add(name string, t Task, opts ...NodeOption) Node {
	if t == nil {
		w.fail(fmt.Errorf("%w: node %q has a nil task", ErrWorkflowInvalid, name))
	}
	return w.add(&wfNode{name: name, task: t}, opts)
}

// Group adds a group named name: a barrier that nodes join with In, and that what needs
// it waits for as a whole. It is sealed when the workflow is enqueued (a sealed group
// with no members is satisfied at once), unless it is opened with OpenGroup: then members
// may be added later with [Queue.AddToWorkflow] until [Queue.SealGroup].
func (w *Workflow) Group(name string, opts ...NodeOption) Node {
	return w.add(&wfNode{name: name}, opts)
}

// OpenGroup is a NodeOption for Group: the group stays open for members added later.
func OpenGroup() NodeOption {
	return nodeOptionFunc(func(n *wfNode) { n.open = true })
}

func (w *Workflow) add(n *wfNode, opts []NodeOption) Node {
	for _, o := range opts {
		if o != nil {
			o.applyNode(n)
		}
	}
	switch {
	case n.err != nil:
		w.fail(n.err)
	case n.name == "" || len(n.name) > MaxNodeNameBytes || !validText(n.name, MaxNodeNameBytes):
		w.fail(fmt.Errorf("%w: node name %q must be 1 to %d bytes of text", ErrWorkflowInvalid, n.name, MaxNodeNameBytes))
	case w.byName[n.name] != nil:
		w.fail(fmt.Errorf("%w: node %q added twice", ErrWorkflowInvalid, n.name))
	case n.task == nil && len(n.deps) > 0:
		w.fail(fmt.Errorf("%w: group %q needs nodes; a group waits for its members only", ErrWorkflowInvalid, n.name))
	case n.task == nil && n.delay != 0:
		w.fail(fmt.Errorf("%w: group %q has a delay", ErrWorkflowInvalid, n.name))
	case n.hasPolicy && len(n.deps) == 0 && n.policy != PolicySucceeded:
		w.fail(fmt.Errorf("%w: node %q has policy %v and needs nothing", ErrWorkflowInvalid, n.name, n.policy))
	case n.delay < 0:
		w.fail(fmt.Errorf("%w: node %q has a negative delay", ErrWorkflowInvalid, n.name))
	}
	if w.byName[n.name] == nil {
		w.byName[n.name] = n
		w.nodes = append(w.nodes, n)
	}
	return Node{name: n.name}
}

func (w *Workflow) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// validate checks the graph: names, references, attachments to groups, no cycle.
// existing are the nodes of the running workflow w is added to (nil for a new one):
// w's nodes may need them and join their open groups, and must not repeat their names.
func (w *Workflow) validate(existing []*dbsqlc.WorkflowGraphRow) error {
	if w.err != nil {
		return w.err
	}
	if len(w.name) > 256 || !utf8.ValidString(w.name) {
		return fmt.Errorf("%w: name must be at most 256 bytes of UTF-8", ErrWorkflowInvalid)
	}
	if w.key != "" && !validText(w.key, MaxWorkflowKeyBytes) {
		return fmt.Errorf("%w: key must be at most %d bytes of text", ErrWorkflowInvalid, MaxWorkflowKeyBytes)
	}
	if len(w.nodes) == 0 {
		return fmt.Errorf("%w: no nodes", ErrWorkflowInvalid)
	}
	if len(w.nodes) > MaxWorkflowNodes {
		return fmt.Errorf("%w: %d nodes, more than %d", ErrWorkflowInvalid, len(w.nodes), MaxWorkflowNodes)
	}
	old := make(map[string]*dbsqlc.WorkflowGraphRow, len(existing))
	for _, o := range existing {
		old[o.Node] = o
	}
	edges := 0
	for _, n := range w.nodes {
		if old[n.name] != nil {
			return fmt.Errorf("%w: the workflow has a node %q already", ErrWorkflowInvalid, n.name)
		}
		seen := map[string]bool{}
		for _, d := range n.deps {
			if w.byName[d] == nil && old[d] == nil {
				return fmt.Errorf("%w: node %q needs unknown node %q", ErrWorkflowInvalid, n.name, d)
			}
			if seen[d] {
				return fmt.Errorf("%w: node %q needs %q twice", ErrWorkflowInvalid, n.name, d)
			}
			seen[d] = true
		}
		edges += len(n.deps)
		if n.parent != "" {
			p, o := w.byName[n.parent], old[n.parent]
			switch {
			case o != nil && (!o.Grp || o.Sealed):
				return fmt.Errorf("%w: node %q is in %q, which is %w of the workflow", ErrWorkflowInvalid, n.name, n.parent, errNotOpenGroup)
			case o == nil && (p == nil || p.task != nil):
				return fmt.Errorf("%w: node %q is in %q, which is not a group of the workflow", ErrWorkflowInvalid, n.name, n.parent)
			}
		}
	}
	if edges > MaxWorkflowEdges {
		return fmt.Errorf("%w: %d dependencies, more than %d", ErrWorkflowInvalid, edges, MaxWorkflowEdges)
	}
	// A node waits on its deps, a group on its members: no cycle (depth-first, colours),
	// through the existing nodes too.
	waits := map[string][]string{}
	for _, o := range existing {
		waits[o.Node] = append(waits[o.Node], o.Deps...)
		if o.Parent != "" {
			waits[o.Parent] = append(waits[o.Parent], o.Node)
		}
	}
	for _, n := range w.nodes {
		waits[n.name] = append(waits[n.name], n.deps...)
		if n.parent != "" {
			waits[n.parent] = append(waits[n.parent], n.name)
		}
	}
	const (
		white = iota
		grey
		black
	)
	colour := map[string]int{}
	var visit func(string) error
	visit = func(x string) error {
		colour[x] = grey
		for _, y := range waits[x] {
			switch colour[y] {
			case grey:
				return fmt.Errorf("%w: a cycle through %q and %q", ErrWorkflowInvalid, x, y)
			case white:
				if err := visit(y); err != nil {
					return err
				}
			}
		}
		colour[x] = black
		return nil
	}
	for _, n := range w.nodes {
		if colour[n.name] == white {
			if err := visit(n.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// WorkflowResult is what EnqueueWorkflow did.
type WorkflowResult struct {
	// ID is the workflow's ID.
	ID ulid.ULID
	// Action is ActionInserted, or ActionKept when an open workflow had the key (nothing
	// was written; Jobs is nil).
	Action Action
	// Jobs maps each job node's name to its job's ID.
	Jobs map[string]ulid.ULID
}
