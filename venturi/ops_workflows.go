package venturi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// The operations API of workflows and batches: list them, read one with its nodes, and say
// what a member's node waits for (ExplainJob, JobDetail). Cancel, retry and seal are
// Queue.CancelWorkflow, Queue.RetryWorkflow and Queue.SealGroup (workflow_queue.go).

// Bounds of a workflow listing.
const (
	// ListWorkflowsWindow is how many workflows one page of [Queue.ListWorkflows] reads at
	// most to find the matches of a state, kind or name prefix, which no index serves: a
	// page whose window ends before it is full ends there (WorkflowPage.Partial), and its
	// Next cursor resumes the search after the window. A workflow's row is small: a window
	// costs about 5 ms on the 2-core development machine.
	ListWorkflowsWindow = 10_000
	// MaxWorkflowNamePrefix bounds WorkflowFilter.NamePrefix (a workflow's name is at most
	// 256 bytes).
	MaxWorkflowNamePrefix = 256
	// MaxDetailNodes is the most nodes one [Queue.WorkflowDetail] reads (its default).
	MaxDetailNodes = 1000
	// explainDeps is how many of the nodes a blocked job waits for ExplainJob names.
	explainDeps = 10
)

// WorkflowKind says what a workflow row is: a graph of jobs ([Queue.EnqueueWorkflow]) or
// a batch ([Queue.EnqueueBatch]).
type WorkflowKind string

// Workflow kinds.
const (
	WorkflowKindGraph WorkflowKind = "workflow" // enqueued with EnqueueWorkflow
	WorkflowKindBatch WorkflowKind = "batch"    // enqueued with EnqueueBatch
)

// workflowKindOf names a venturi_workflow row's kind.
func workflowKindOf(k int16) WorkflowKind {
	if k == workflowKindBatch {
		return WorkflowKindBatch
	}
	return WorkflowKindGraph
}

// WorkflowFilter selects workflows for [Queue.ListWorkflows]. Zero fields match
// everything; the fields that are set must all hold; the states are alternatives.
type WorkflowFilter struct {
	// States matches workflows in any of these states; none: every state.
	States []WorkflowState
	// Kind matches workflows of one kind; "" matches both.
	Kind WorkflowKind
	// NamePrefix matches workflows whose name starts with it (case-sensitively).
	NamePrefix string
	// CreatedAfter and CreatedBefore bound the workflow's creation time (database clock),
	// inclusive after, exclusive before; zero for no bound. The ID is bounded by the time
	// too, give or take ListClockSkew, so that the primary key narrows the scan.
	CreatedAfter, CreatedBefore time.Time
	// CreatedWithin matches workflows created less than this long before the database's
	// now().
	CreatedWithin time.Duration
}

// validWorkflowState reports whether s is one of the four workflow states.
func validWorkflowState(s WorkflowState) bool {
	switch s {
	case WorkflowOpen, WorkflowSucceeded, WorkflowFailed, WorkflowCancelled:
		return true
	}
	return false
}

// validate checks f as ParseJobFilter checks a job filter: every value is one the
// database takes, so that a bad one is ErrInvalidFilter, never a database error.
func (f *WorkflowFilter) validate() error {
	for _, s := range f.States {
		if !validWorkflowState(s) {
			return fmt.Errorf("%w: unknown workflow state %q (want open, succeeded, failed or cancelled)", ErrInvalidFilter, s)
		}
	}
	switch f.Kind {
	case "", WorkflowKindGraph, WorkflowKindBatch:
	default:
		return fmt.Errorf("%w: unknown workflow kind %q (want workflow or batch)", ErrInvalidFilter, f.Kind)
	}
	if len(f.NamePrefix) > MaxWorkflowNamePrefix || !utf8.ValidString(f.NamePrefix) || containsNUL(f.NamePrefix) {
		return fmt.Errorf("%w: a name prefix is at most %d bytes of UTF-8 text", ErrInvalidFilter, MaxWorkflowNamePrefix)
	}
	if f.CreatedWithin < 0 {
		return fmt.Errorf("%w: negative CreatedWithin %v", ErrInvalidFilter, f.CreatedWithin)
	}
	return nil
}

// searches reports whether a listing of f reads a search window: it has a predicate that
// no index serves.
func (f *WorkflowFilter) searches() bool {
	return len(f.States) > 0 || f.Kind != "" || f.NamePrefix != ""
}

// WorkflowSummary is one workflow (or batch) as a listing shows it.
type WorkflowSummary struct {
	WorkflowInfo
	// Kind says whether it is a workflow or a batch.
	Kind WorkflowKind
	// CancelRequestedAt is when its cancel was requested (CancelWorkflow, or a fail-fast
	// that tripped); nil when none is in force.
	CancelRequestedAt *time.Time
}

// WorkflowPage is one page of [Queue.ListWorkflows].
type WorkflowPage struct {
	Workflows []WorkflowSummary
	// Next is the cursor of the next page; empty on the last one.
	Next string
	// Partial says the page ended at its search window (ListWorkflowsWindow workflows
	// read) before it was full: Workflows holds the matches found, and Next searches on.
	Partial bool
}

// workflowCursor is the position after a page's last workflow.
type workflowCursor struct {
	Order string    `json:"o"` // always "workflow": no job listing's cursor is one
	ID    ulid.ULID `json:"w"`
}

func (c workflowCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeWorkflowCursor(s string) (*workflowCursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 1024 {
		return nil, ErrInvalidListCursor
	}
	var c workflowCursor
	if err := json.Unmarshal(b, &c); err != nil || c.Order != "workflow" {
		return nil, ErrInvalidListCursor
	}
	return &c, nil
}

// ListWorkflows returns the workflows and batches that match f, newest first (by ID), one
// page at a time: limit (default 50, at most MaxListPage) after cursor (empty for the
// first page; WorkflowPage.Next for the next). A cursor is a position, as for ListJobs:
// workflows enqueued meanwhile never make a listing repeat or skip one.
//
// The listing walks the workflows' primary key, narrowed by the created-time bounds. No
// index serves a state, a kind or a name prefix: with one of them a page reads at most
// [ListWorkflowsWindow] workflows, and ends early when the window does
// (WorkflowPage.Partial; Next searches on). Each statement is bounded by [ListTimeout].
func (q *Queue) ListWorkflows(ctx context.Context, f WorkflowFilter, cursor string, limit int) (WorkflowPage, error) {
	if err := f.validate(); err != nil {
		return WorkflowPage{}, err
	}
	if limit <= 0 {
		limit = defaultListPage
	}
	limit = min(limit, MaxListPage)
	cur, err := decodeWorkflowCursor(cursor)
	if err != nil {
		return WorkflowPage{}, err
	}
	skew := delayOf(ListClockSkew)
	p := dbsqlc.ListWorkflowsParams{States: []string{}, Kind: -1, NamePrefix: f.NamePrefix, SkewUs: skew, MinusSkewUs: -skew,
		WithinUs: delayOf(f.CreatedWithin), WithinSkewUs: delayOf(f.CreatedWithin) + skew, Max: int32(limit + 1)}
	p.Scan = p.Max
	if f.searches() {
		p.Scan = max(p.Max, ListWorkflowsWindow)
	}
	for _, s := range f.States {
		p.States = append(p.States, string(s))
	}
	switch f.Kind {
	case WorkflowKindGraph:
		p.Kind = workflowKindGraph
	case WorkflowKindBatch:
		p.Kind = workflowKindBatch
	}
	if !f.CreatedAfter.IsZero() {
		p.HasAfter, p.After = true, f.CreatedAfter
	}
	if !f.CreatedBefore.IsZero() {
		p.HasBefore, p.Before = true, f.CreatedBefore
	}
	if cur != nil {
		p.HasCursor, p.CID = true, uuidOf(cur.ID)
	}
	var rows []*dbsqlc.ListWorkflowsRow
	err = q.readTx(ctx, func(tx pgx.Tx) (err error) {
		rows, err = q.q.ListWorkflows(ctx, tx, p)
		return err
	})
	if err != nil {
		return WorkflowPage{}, err
	}
	slices.SortFunc(rows, func(a, b *dbsqlc.ListWorkflowsRow) int { return ulidOf(b.ID).Compare(ulidOf(a.ID)) })
	var page WorkflowPage
	if n := len(rows); n > 0 && !rows[n-1].Hit { // the search window ended first
		page.Next, page.Partial = workflowCursor{Order: "workflow", ID: ulidOf(rows[n-1].ID)}.encode(), true
		rows = rows[:n-1]
	}
	if len(rows) > limit {
		rows = rows[:limit]
		page.Next, page.Partial = workflowCursor{Order: "workflow", ID: ulidOf(rows[limit-1].ID)}.encode(), false
	}
	page.Workflows = make([]WorkflowSummary, len(rows))
	for i, r := range rows {
		page.Workflows[i] = workflowSummaryOf(r.ID, r.Kind, r.Name, r.Key, r.State, r.FailFast, r.Attempt, r.Nodes,
			r.OpenNodes, r.CancelNote, r.CancelRequestedAt, r.CreatedAt, r.FinishedAt)
	}
	return page, nil
}

// workflowSummaryOf converts a workflow's row.
func workflowSummaryOf(id pgtype.UUID, kind int16, name, key, state string, failFast bool, attempt, nodes, open int32,
	cancelNote string, cancelAt *time.Time, createdAt time.Time, finishedAt *time.Time,
) WorkflowSummary {
	return WorkflowSummary{Kind: workflowKindOf(kind), CancelRequestedAt: cancelAt, WorkflowInfo: WorkflowInfo{
		ID: ulidOf(id), Name: name, Key: key, State: WorkflowState(state), FailFast: failFast, Attempt: int(attempt),
		Nodes: int(nodes), OpenNodes: int(open), CancelNote: cancelNote, CreatedAt: createdAt, FinishedAt: finishedAt}}
}

// WorkflowDetail is one workflow (or batch) with its nodes, as [Queue.WorkflowDetail]
// reads it.
type WorkflowDetail struct {
	WorkflowSummary
	// NodeList holds its nodes by name, at most the limit asked for, each with its job's
	// state and outcome (see [Queue.WorkflowNodes]); Nodes (WorkflowInfo's) counts them all.
	NodeList []NodeInfo
	// NextNode is the name to read the next nodes after (WorkflowDetail's after, or
	// [Queue.WorkflowNodes]); empty when NodeList holds the last one.
	NextNode string
	// Batch holds a batch's counts; nil for a workflow.
	Batch *BatchInfo
}

// WorkflowDetail reads workflow id with up to limit of its nodes whose names sort after
// after (0 or more than MaxDetailNodes: MaxDetailNodes), in one snapshot, and a batch's
// counts. ErrWorkflowNotFound when there is no such workflow (or it was pruned).
func (q *Queue) WorkflowDetail(ctx context.Context, id ulid.ULID, after string, limit int) (*WorkflowDetail, error) {
	if limit <= 0 || limit > MaxDetailNodes {
		limit = MaxDetailNodes
	}
	if !validText(after, MaxNodeNameBytes) {
		return nil, fmt.Errorf("%w: bad node name to start after", ErrInvalidListCursor)
	}
	var d *WorkflowDetail
	err := q.readTx(ctx, func(tx pgx.Tx) error {
		r, err := q.q.WorkflowSummaryByID(ctx, tx, uuidOf(id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrWorkflowNotFound
		}
		if err != nil {
			return err
		}
		d = &WorkflowDetail{WorkflowSummary: workflowSummaryOf(r.ID, r.Kind, r.Name, r.Key, r.State, r.FailFast, r.Attempt,
			r.Nodes, r.OpenNodes, r.CancelNote, r.CancelRequestedAt, r.CreatedAt, r.FinishedAt)}
		rows, err := q.q.WorkflowNodes(ctx, tx, dbsqlc.WorkflowNodesParams{WorkflowID: uuidOf(id), After: after, Max: int32(limit + 1)})
		if err != nil {
			return err
		}
		if len(rows) > limit {
			rows = rows[:limit]
			d.NextNode = rows[limit-1].Node
		}
		d.NodeList = make([]NodeInfo, len(rows))
		for i, r := range rows {
			n := NodeInfo{Name: r.Node, Group: !r.JobID.Valid, Policy: Policy(r.Policy), Needs: r.Deps, In: r.Parent,
				JobState: State(r.JobState), Own: r.Own, Outcome: r.Outcome, Waiting: int(r.Waiting), Holds: int(r.Holds)}
			if r.JobID.Valid {
				n.JobID = ulidOf(r.JobID)
			}
			d.NodeList[i] = n
		}
		if d.Kind == WorkflowKindBatch {
			d.Batch, err = batchInfo(ctx, q.q, tx, id)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// JobWorkflow names the workflow (or batch) and the node a job is a member of.
type JobWorkflow struct {
	ID    ulid.ULID // the workflow's
	Kind  WorkflowKind
	Name  string // the workflow's name
	State WorkflowState
	// Node is the job's node: its name in the workflow (a batch member's is its job's ID;
	// a callback's on_success, on_end or on_failure).
	Node string
	// Policy is what the node needs of the nodes it needs (Needs).
	Policy Policy
}

// jobWorkflow reads the workflow and node job id is a member of and what its node waits
// for; nil when it is in no workflow (or its workflow was pruned).
func (q *Queue) jobWorkflow(ctx context.Context, db dbsqlc.DBTX, id ulid.ULID) (*JobWorkflow, []*dbsqlc.JobWorkflowWaitRow, error) {
	rows, err := q.q.JobWorkflowWait(ctx, db, dbsqlc.JobWorkflowWaitParams{JobID: uuidOf(id), Max: explainDeps})
	if err != nil || len(rows) == 0 {
		return nil, nil, err
	}
	r := rows[0]
	return &JobWorkflow{ID: ulidOf(r.WorkflowID), Kind: workflowKindOf(r.Kind), Name: r.Name, State: WorkflowState(r.State),
		Node: r.Node, Policy: Policy(r.Policy)}, rows, nil
}

// workflowReasons says where job j stands in its workflow w: for a blocked job, what its
// node waits for (the nodes it needs that have not ended, with their states).
func workflowReasons(j *Job, w *JobWorkflow, rows []*dbsqlc.JobWorkflowWaitRow) []string {
	what := "workflow"
	if w.Kind == WorkflowKindBatch {
		what = "batch"
	}
	where := fmt.Sprintf("node %q of %s %s", w.Node, what, w.ID)
	if w.Name != "" {
		where += fmt.Sprintf(" (%q)", w.Name)
	}
	me := rows[0]
	if j.State != StateBlocked {
		return []string{fmt.Sprintf("%s, which is %s", where, w.State)}
	}
	if me.Cancelling {
		return []string{fmt.Sprintf("blocked: %s, which is being cancelled: the node ends cancelled without a run", where)}
	}
	if me.Dep == "" {
		return []string{fmt.Sprintf("blocked: %s; what it needs has ended: the workflow's next settle releases it or decides it without a run", where)}
	}
	waiting := max(int(me.Waiting), len(rows))
	out := []string{fmt.Sprintf("blocked: %s waits for %d of the %d nodes it needs; it runs %s",
		where, waiting, me.NDeps, policyText(w.Policy))}
	for _, r := range rows {
		out = append(out, fmt.Sprintf("needs %s: %s", r.Dep, depText(r)))
	}
	if more := waiting - len(rows); more > 0 {
		out = append(out, fmt.Sprintf("and %d more of the nodes it needs have not ended", more))
	}
	if me.DelayUs > 0 {
		out = append(out, fmt.Sprintf("once released, it is due %s later (DelayAfterDeps)", roundDuration(time.Duration(me.DelayUs)*time.Microsecond)))
	}
	return out
}

// policyText says when a node of policy p runs.
func policyText(p Policy) string {
	switch p {
	case PolicyEnded:
		return "once every one of them ended, whatever the outcome (NeedsEnded)"
	case PolicyFailed:
		return "as soon as one of them fails, and is skipped when none does (NeedsFailure)"
	}
	return "once every one of them completed; a failure or cancel among them cancels it (Needs)"
}

// depText says why a node that another waits for has not ended.
func depText(r *dbsqlc.JobWorkflowWaitRow) string {
	switch {
	case r.DepGroup && !r.DepSealed:
		return fmt.Sprintf("an open group: it takes members until it is sealed (SealGroup, SealBatch), then waits for them (%d have not ended)", r.DepHolds)
	case r.DepGroup:
		return fmt.Sprintf("a group, %d of whose members have not ended", r.DepHolds)
	case r.DepOwn != "" && r.DepHolds > 0:
		return fmt.Sprintf("its job ended (%s); %d nodes attached to it (spawned) have not ended", r.DepOwn, r.DepHolds)
	case r.DepState == "":
		return "its job is gone (deleted or pruned); the workflow has not settled its end yet"
	}
	return "its job is " + strings.ToLower(r.DepState)
}
