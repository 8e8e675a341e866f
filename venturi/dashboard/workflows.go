package dashboard

// The workflow pages: the list of workflows and batches, one workflow with its graph, and
// the cancel and retry actions.

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Bounds of the workflow pages.
const (
	// MaxGraphNodes is the most nodes a workflow's page draws as a graph; a larger one is
	// listed in its table only (a batch's members are drawn as one box, whatever their
	// number).
	MaxGraphNodes = 200
	// nodesPerPage is how many nodes a workflow's page lists at a time.
	nodesPerPage = MaxGraphNodes
)

// workflowStates are the workflow list's tabs.
var workflowStates = []venturi.WorkflowState{venturi.WorkflowOpen, venturi.WorkflowSucceeded, venturi.WorkflowFailed,
	venturi.WorkflowCancelled}

type workflowsData struct {
	State, Kind, Name string
	Tabs              []tab
	Kinds             []option
	Workflows         []venturi.WorkflowSummary
	NextURL, FirstURL string
	Partial           bool // the page ended at its search window (venturi.ListWorkflowsWindow)
	Window            int
}

// option is one choice of a select.
type option struct {
	Value, Label string
	Selected     bool
}

// workflows reads one page of ListWorkflows: newest first by the workflows' primary key;
// a state, kind or name prefix reads at most a search window of workflows
// (venturi.ListWorkflowsWindow).
func (h *handler) workflows(rq *request) (*view, error) {
	q := rq.r.URL.Query()
	state, kind, name, cursor := q.Get("state"), q.Get("kind"), q.Get("name"), q.Get("cursor")
	limit := DefaultPageSize
	lim := ""
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return nil, badRequest("The page size must be a number from 1 to " + strconv.Itoa(MaxPageSize) + ".")
		}
		limit, lim = n, s
	}
	f := venturi.WorkflowFilter{NamePrefix: name}
	switch {
	case state != "" && !slices.Contains(workflowStates, venturi.WorkflowState(state)):
		return nil, badRequest("Unknown state tab.")
	case kind != "" && kind != string(venturi.WorkflowKindGraph) && kind != string(venturi.WorkflowKindBatch):
		return nil, badRequest("Unknown kind: choose workflows or batches.")
	case len(name) > venturi.MaxWorkflowNamePrefix || !storableText(name):
		return nil, badRequest("The name must be at most " + strconv.Itoa(venturi.MaxWorkflowNamePrefix) + " bytes of text.")
	case len(cursor) > 1024:
		return nil, badRequest("The page cursor is too long.")
	}
	if state != "" {
		f.States = []venturi.WorkflowState{venturi.WorkflowState(state)}
	}
	f.Kind = venturi.WorkflowKind(kind)
	if state != "" || kind != "" || name != "" {
		// A search window: not from another site (see sameOrigin).
		if err := h.sameOrigin(rq); err != nil {
			return nil, err
		}
	}
	page, err := h.q.ListWorkflows(rq.ctx, f, cursor, limit)
	if err != nil {
		return nil, err
	}
	d := &workflowsData{State: state, Kind: kind, Name: name, Workflows: page.Workflows, Partial: page.Partial,
		Window: venturi.ListWorkflowsWindow}
	d.Tabs = append(d.Tabs, tab{Label: "all", URL: h.url("/workflows", "kind", kind, "name", name), Active: state == ""})
	for _, s := range workflowStates {
		d.Tabs = append(d.Tabs, tab{Label: string(s), URL: h.url("/workflows", "state", string(s), "kind", kind, "name", name),
			Active: state == string(s)})
	}
	for _, k := range []option{{"", "workflows and batches", false}, {string(venturi.WorkflowKindGraph), "workflows", false},
		{string(venturi.WorkflowKindBatch), "batches", false}} {
		k.Selected = k.Value == kind
		d.Kinds = append(d.Kinds, k)
	}
	if page.Next != "" {
		d.NextURL = h.url("/workflows", "state", state, "kind", kind, "name", name, "limit", lim, "cursor", page.Next)
	}
	if cursor != "" {
		d.FirstURL = h.url("/workflows", "state", state, "kind", kind, "name", name, "limit", lim)
	}
	return &view{tmpl: "workflows", title: "Workflows", nav: "workflows", data: d}, nil
}

type workflowData struct {
	*venturi.WorkflowDetail
	Graph     *graph
	GraphNote string // why there is no graph
	// Cancel and Retry: the actions that apply to its state and are granted.
	Cancel, Retry     bool
	JobsURL           string // its jobs in the job list
	NextURL, FirstURL string // the node table's pages
}

// workflow reads WorkflowDetail (the workflow's row, a page of its nodes by their primary
// key, a batch's counts) and draws the nodes as a graph when they fit on the page; a
// batch's graph reads its group and callbacks too (a second page of its nodes, at most
// four).
func (h *handler) workflow(rq *request) (*view, error) {
	id, err := ulid.ParseStrict(rq.r.PathValue("id"))
	if err != nil {
		return nil, errNotFound
	}
	after := rq.r.URL.Query().Get("after")
	if len(after) > venturi.MaxNodeNameBytes || !storableText(after) {
		return nil, badRequest("Bad page of the nodes.")
	}
	d, err := h.q.WorkflowDetail(rq.ctx, id, after, nodesPerPage)
	if err != nil {
		return nil, err
	}
	wd := &workflowData{WorkflowDetail: d, JobsURL: h.url("/jobs", "q", "workflow:"+id.String())}
	switch {
	case d.Kind == venturi.WorkflowKindBatch:
		// A batch's members are named after their jobs' IDs (upper-case ULIDs), which sort
		// before the lower-case names of its group and callbacks: those follow "a".
		top, err := h.q.WorkflowDetail(rq.ctx, id, "a", 8)
		if err != nil {
			return nil, err
		}
		wd.Graph = layoutBatch(h.cfg.Prefix, top.NodeList, d.Batch)
	case after == "" && d.NextNode == "":
		wd.Graph = layout(h.cfg.Prefix, d.NodeList)
	case d.Nodes <= MaxGraphNodes:
		wd.GraphNote = "The graph is drawn on the first page of the nodes."
	default:
		wd.GraphNote = "The graph is drawn for workflows of at most " + strconv.Itoa(MaxGraphNodes) +
			" nodes; this one has " + fmtCount(int64(d.Nodes)) + ": the table lists them by name."
	}
	if d.NextNode != "" {
		wd.NextURL = h.url("/workflows/"+id.String(), "after", d.NextNode)
	}
	if after != "" {
		wd.FirstURL = h.url("/workflows/" + id.String())
	}
	wd.Cancel = d.State == venturi.WorkflowOpen && d.CancelRequestedAt == nil && rq.access.Can(Cancel)
	wd.Retry = (d.State == venturi.WorkflowFailed || d.State == venturi.WorkflowCancelled) && rq.access.Can(Retry)
	title := "Workflow "
	if d.Kind == venturi.WorkflowKindBatch {
		title = "Batch "
	}
	if d.Name != "" {
		title += d.Name
	} else {
		title += d.ID.String()
	}
	return &view{tmpl: "workflow", title: title, nav: "workflows", data: wd}, nil
}

// workflowAction cancels or retries a workflow (grants Cancel and Retry), noting the actor
// and the reason in the journal of each job it changes.
func (h *handler) workflowAction(rq *request) (string, error) {
	id, err := ulid.ParseStrict(rq.r.PathValue("id"))
	if err != nil {
		return "", errNotFound
	}
	reason, err := reasonOf(rq.r)
	if err != nil {
		return "", err
	}
	actor := rq.access.auditActor()
	if actor == "" {
		actor = "unknown"
	}
	back := "/workflows/" + id.String()
	switch rq.r.PathValue("action") {
	case "cancel":
		if err := rq.need(Cancel); err != nil {
			return "", err
		}
		err := h.q.CancelWorkflow(rq.ctx, id, actorNote("cancelled by "+actor, reason))
		if errors.Is(err, venturi.ErrWorkflowFinished) {
			return "", &userError{status: http.StatusConflict, msg: "The workflow is not open (it has finished): there is nothing to cancel."}
		}
		if err != nil {
			return "", err
		}
		return back + "?done=wf-cancelled", nil
	case "retry":
		if err := rq.need(Retry); err != nil {
			return "", err
		}
		n, err := h.q.RetryWorkflow(rq.ctx, id, actorNote("by "+actor, reason))
		if errors.Is(err, venturi.ErrWorkflowNotFound) {
			return "", errNotFound
		}
		if err != nil {
			return "", err
		}
		return back + "?done=wf-retried&n=" + strconv.Itoa(n), nil
	}
	return "", errNotFound
}

// actorNote joins who acted and why.
func actorNote(who, reason string) string {
	if reason == "" {
		return who
	}
	return who + ": " + reason
}

// ---- the graph ---------------------------------------------------------------------------

// graph is a workflow's nodes laid out by topological level, left to right, for an inline
// SVG: each node at the level after the last of what it waits for.
type graph struct {
	W, H  int
	Nodes []graphNode
	Edges []graphEdge
}

// graphNode is one node's box.
type graphNode struct {
	X, Y, W, H  int
	TextX       int
	NameY, SubY int
	Name, Sub   string // the name (cut to fit) and its state and outcome
	Node        string // the node's whole name
	Title       string // the whole name and what the box says, for a tooltip
	Class       string // its colour: ok, bad, active, muted, blocked, group
	URL         string // its job's page; empty for a group
	Group       bool
}

// graphEdge is one arrow: a needs edge (to what needs a node), a member's (to its group)
// or a spawn's (from a spawner to what it spawned).
type graphEdge struct {
	D     string // the SVG path
	Class string // needs (with ended or failure for those policies), member, spawn
}

// The graph's dimensions, in SVG units (pixels at 100%).
const (
	boxW      = 176
	boxH      = 42
	gapX      = 52
	gapY      = 12
	margin    = 6
	nameChars = 24
	subChars  = 30
)

// levels returns each node's topological level: 0 for a node that waits for nothing, else
// one more than the highest of what it waits for (the nodes it needs, a group's members,
// a spawned node's spawner). A cycle, which the queue refuses, would leave its nodes at
// the last level.
func levels(nodes []venturi.NodeInfo) (map[string]int, []graphLink) {
	by := make(map[string]*venturi.NodeInfo, len(nodes))
	for i := range nodes {
		by[nodes[i].Name] = &nodes[i]
	}
	var links []graphLink
	for _, n := range nodes {
		class := "needs" // by the policy of what needs: Needs, NeedsEnded, NeedsFailure
		switch n.Policy {
		case venturi.PolicyEnded:
			class = "needs ended"
		case venturi.PolicyFailed:
			class = "needs failure"
		}
		for _, dep := range n.Needs {
			if by[dep] != nil {
				links = append(links, graphLink{from: dep, to: n.Name, class: class})
			}
		}
		if p := by[n.In]; p != nil {
			if p.Group {
				links = append(links, graphLink{from: n.Name, to: p.Name, class: "member"})
			} else {
				links = append(links, graphLink{from: p.Name, to: n.Name, class: "spawn"})
			}
		}
	}
	in := map[string]int{}
	out := map[string][]string{}
	for _, l := range links {
		in[l.to]++
		out[l.from] = append(out[l.from], l.to)
	}
	level := map[string]int{}
	var ready []string
	for _, n := range nodes {
		if in[n.Name] == 0 {
			ready = append(ready, n.Name)
		}
	}
	done := 0
	for len(ready) > 0 {
		x := ready[0]
		ready = ready[1:]
		done++
		for _, y := range out[x] {
			level[y] = max(level[y], level[x]+1)
			if in[y]--; in[y] == 0 {
				ready = append(ready, y)
			}
		}
	}
	if done < len(nodes) {
		last := 0
		for _, l := range level {
			last = max(last, l)
		}
		for _, n := range nodes {
			if in[n.Name] > 0 {
				level[n.Name] = last + 1
			}
		}
	}
	return level, links
}

// graphLink is an edge between two named nodes.
type graphLink struct{ from, to, class string }

// layout lays nodes out by level (columns), each column in name order.
func layout(prefix string, nodes []venturi.NodeInfo) *graph {
	if len(nodes) == 0 {
		return nil
	}
	level, links := levels(nodes)
	cols := map[int][]venturi.NodeInfo{}
	last := 0
	for _, n := range nodes { // by name: the API's order
		l := level[n.Name]
		cols[l] = append(cols[l], n)
		last = max(last, l)
	}
	g := &graph{}
	at := map[string]int{} // a node's box in g.Nodes, by name
	rows := 0
	for l := 0; l <= last; l++ {
		for i, n := range cols[l] {
			at[n.Name] = len(g.Nodes)
			g.Nodes = append(g.Nodes, box(prefix, n, margin+l*(boxW+gapX), margin+i*(boxH+gapY)))
		}
		rows = max(rows, len(cols[l]))
	}
	for _, l := range links {
		g.Edges = append(g.Edges, graphEdge{D: edgePath(&g.Nodes[at[l.from]], &g.Nodes[at[l.to]]), Class: l.class})
	}
	g.W = 2*margin + (last+1)*boxW + last*gapX
	g.H = 2*margin + rows*boxH + max(rows-1, 0)*gapY
	return g
}

// box is a node's box at (x, y).
func box(prefix string, n venturi.NodeInfo, x, y int) graphNode {
	b := graphNode{X: x, Y: y, W: boxW, H: boxH, TextX: x + 8, NameY: y + 17, SubY: y + 33, Name: cut(n.Name, nameChars),
		Node: n.Name, Group: n.Group}
	var parts []string
	switch {
	case n.Group:
		parts = append(parts, "group")
	case n.JobState != "":
		parts = append(parts, string(n.JobState))
		b.URL = prefix + "/jobs/" + n.JobID.String()
	default:
		parts = append(parts, "job gone")
		b.URL = prefix + "/jobs/" + n.JobID.String()
	}
	switch {
	case n.Outcome != "":
		parts = append(parts, n.Outcome)
	case n.Own != "":
		parts = append(parts, n.Own+", waits for what it holds")
	case n.Group:
		parts = append(parts, "waiting")
	}
	b.Sub = strings.Join(parts, " · ")
	b.Title = n.Name + " — " + b.Sub
	b.Sub = cut(b.Sub, subChars)
	b.Class = nodeClass(n)
	return b
}

// nodeClass is the colour of a node: by its outcome once it has one, else by its job's
// state (a group: group).
func nodeClass(n venturi.NodeInfo) string {
	o := n.Outcome
	if o == "" {
		o = n.Own
	}
	switch o {
	case "ok":
		return "ok"
	case "fail", "dfail":
		return "bad"
	case "cancel", "dcancel", "skip", "del":
		return "muted"
	}
	if n.Group {
		return "group"
	}
	switch n.JobState {
	case venturi.StateRunning, venturi.StateAvailable:
		return "active"
	case venturi.StateBlocked:
		return "blocked"
	case venturi.StateScheduled, venturi.StateWaiting:
		return "warn"
	}
	return ""
}

// edgePath is a curve from the right of a to the left of b.
func edgePath(a, b *graphNode) string {
	x1, y1 := a.X+a.W, a.Y+a.H/2
	x2, y2 := b.X-2, b.Y+b.H/2
	mx := (x1 + x2) / 2
	itoa := strconv.Itoa
	return "M" + itoa(x1) + "," + itoa(y1) + " C" + itoa(mx) + "," + itoa(y1) + " " + itoa(mx) + "," + itoa(y2) + " " + itoa(x2) + "," + itoa(y2)
}

// cut shortens s to n runes, marking the cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// layoutBatch draws a batch: its members as one box with their counts, and its callbacks
// (top: the group and the callbacks, the batch's nodes with lower-case names).
func layoutBatch(prefix string, top []venturi.NodeInfo, b *venturi.BatchInfo) *graph {
	var nodes []venturi.NodeInfo
	for _, n := range top {
		if n.In == "" {
			nodes = append(nodes, n)
		}
	}
	g := layout(prefix, nodes)
	if g == nil || b == nil {
		return g
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.Node == venturi.BatchMembers && n.Group {
			var parts []string
			for _, c := range []struct {
				n    int
				what string
			}{{b.Succeeded, "ok"}, {b.Failed, "failed"}, {b.Cancelled, "cancelled"}, {b.Pending, "pending"}} {
				if c.n > 0 {
					parts = append(parts, fmtCount(int64(c.n))+" "+c.what)
				}
			}
			n.Name = fmtCount(int64(b.Total)) + " members"
			n.Title = "members — " + strings.Join(parts, " · ")
			n.Sub = cut(strings.Join(parts, " · "), subChars)
		}
	}
	return g
}
