package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// EnqueueWorkflow writes w in one transaction: the workflow, its nodes and their jobs.
// The nodes that need nothing are due at once (or at their At or After); the others
// wait, blocked, until what they need allows them to run. With a [WorkflowKey] that an
// open workflow has, it writes nothing and returns that workflow (ActionKept).
func (q *Queue) EnqueueWorkflow(ctx context.Context, w *Workflow) (WorkflowResult, error) {
	var res WorkflowResult
	err := pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		res, err = q.enqueueWorkflow(ctx, tx, w)
		return err
	})
	return res, err
}

// EnqueueWorkflowTx is EnqueueWorkflow in the caller's transaction, which must be READ
// COMMITTED (ErrIsolation otherwise): the workflow exists, and its roots can run, once tx
// commits.
func (q *Queue) EnqueueWorkflowTx(ctx context.Context, tx pgx.Tx, w *Workflow) (WorkflowResult, error) {
	if tx == nil {
		return WorkflowResult{}, errors.New("venturi: EnqueueWorkflowTx needs a transaction")
	}
	iso, err := q.q.TransactionIsolation(ctx, tx)
	if err != nil {
		return WorkflowResult{}, err
	}
	if iso != "read committed" {
		return WorkflowResult{}, fmt.Errorf("%w (a workflow's enqueue; the transaction is %s)", ErrIsolation, iso)
	}
	return q.enqueueWorkflow(ctx, tx, w)
}

// wfNodeRow is a node as InsertWorkflowNodes reads it.
type wfNodeRow struct {
	Node     string    `json:"node"`
	JobID    string    `json:"job_id,omitempty"`
	Policy   Policy    `json:"policy"`
	Deps     []string  `json:"deps"`
	Parent   *string   `json:"parent,omitempty"`
	Sealed   bool      `json:"sealed"`
	Released bool      `json:"released"`
	DelayUs  int64     `json:"delay_us"`
}

func (q *Queue) enqueueWorkflow(ctx context.Context, tx pgx.Tx, w *Workflow) (WorkflowResult, error) {
	if w == nil {
		return WorkflowResult{}, fmt.Errorf("%w: nil workflow", ErrWorkflowInvalid)
	}
	if err := w.validate(); err != nil {
		return WorkflowResult{}, err
	}
	// Prepare every job before writing anything.
	res := WorkflowResult{ID: ulid.Make(), Action: ActionInserted, Jobs: map[string]ulid.ULID{}}
	var plain dbsqlc.InsertJobsParams // the jobs, as InsertJobs takes them
	var released []bool
	var nodes []wfNodeRow
	notify := map[string]bool{}
	for _, n := range w.nodes {
		row := wfNodeRow{Node: n.name, Policy: n.policy, Deps: n.deps, Sealed: n.task != nil || !n.open, DelayUs: delayOf(n.delay)}
		if row.Deps == nil {
			row.Deps = []string{}
		}
		if n.parent != "" {
			row.Parent = &n.parent
		}
		if n.task != nil {
			p, err := q.prepare(n.task, n.opts)
			if err != nil {
				return WorkflowResult{}, fmt.Errorf("node %q: %w", n.name, err)
			}
			row.JobID = uuidText(p.id)
			// A root is released as it is written; the others wait.
			row.Released = len(n.deps) == 0
			res.Jobs[n.name] = p.id
			delay := p.opts.delay
			if row.Released {
				delay += n.delay
			}
			appendJob(&plain, p, delay)
			released = append(released, row.Released)
			if row.Released {
				notify[notifyPayload(p.kind, p.dueNow() && n.delay <= 0)] = true
			}
		}
		nodes = append(nodes, row)
	}
	nodesJSON, err := json.Marshal(nodes)
	if err != nil {
		return WorkflowResult{}, err
	}

	ids, err := q.q.InsertWorkflow(ctx, tx, dbsqlc.InsertWorkflowParams{ID: uuidOf(res.ID), Name: w.name, Key: w.key, FailFast: w.failFast})
	if err != nil {
		return WorkflowResult{}, fmt.Errorf("venturi: insert workflow: %w", err)
	}
	if len(ids) == 0 {
		id, err := q.q.OpenWorkflowByKey(ctx, tx, w.key)
		if err != nil {
			return WorkflowResult{}, fmt.Errorf("venturi: find the workflow with key %q: %w", w.key, err)
		}
		return WorkflowResult{ID: ulidOf(id), Action: ActionKept}, nil
	}
	jobs := dbsqlc.InsertWorkflowJobsParams{WorkflowID: uuidOf(res.ID), Ids: plain.Ids, Kinds: plain.Kinds,
		Queues: plain.Queues, Priorities: plain.Priorities, Payloads: plain.Payloads, HasAt: plain.HasAt, Ats: plain.Ats,
		DelaysUs: plain.DelaysUs, HasPart: plain.HasPart, Parts: plain.Parts, SlotKeys: plain.SlotKeys,
		SlotLimits: plain.SlotLimits, SlotPolicies: plain.SlotPolicies, Events: plain.Events, Metas: plain.Metas,
		Released: released}
	b := &pgx.Batch{}
	dbsqlc.QueueInsertWorkflowNodes(b, dbsqlc.InsertWorkflowNodesParams{WorkflowID: uuidOf(res.ID), Nodes: nodesJSON})
	dbsqlc.QueueInsertWorkflowJobs(b, jobs)
	dbsqlc.QueueSettleWorkflows(b, dbsqlc.SettleWorkflowsParams{Ids: []pgtype.UUID{uuidOf(res.ID)}, Channel: q.notifyChannel()})
	if !q.poll {
		for payload := range notify {
			dbsqlc.QueueNotify(b, dbsqlc.NotifyParams{Channel: q.channel, Payload: payload})
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return WorkflowResult{}, fmt.Errorf("venturi: write workflow: %w", err)
	}
	return res, nil
}

// notifyChannel is the channel the settle functions tell released jobs' kinds on ("" in
// poll-only mode).
func (q *Queue) notifyChannel() string { return notifyChannelOf(q.poll, q.channel) }

// notifyChannelOf is channel, or "" in poll-only mode.
func notifyChannelOf(poll bool, channel string) string {
	if poll {
		return ""
	}
	return channel
}

// WorkflowState is a workflow's state.
type WorkflowState string

// Workflow states.
const (
	WorkflowOpen      WorkflowState = "open"      // a node has not ended
	WorkflowSucceeded WorkflowState = "succeeded" // every node completed (or was skipped)
	WorkflowFailed    WorkflowState = "failed"    // a node failed (or fail-fast cancelled the rest)
	WorkflowCancelled WorkflowState = "cancelled" // the workflow or a node was cancelled
)

// WorkflowInfo is a workflow as it stands.
type WorkflowInfo struct {
	ID         ulid.ULID
	Name       string
	Key        string
	State      WorkflowState
	FailFast   bool
	Attempt    int
	Nodes      int // how many nodes it has
	OpenNodes  int // how many have not ended (with what is attached to them)
	CancelNote string
	CreatedAt  time.Time
	FinishedAt *time.Time
}

// NodeInfo is one node of a workflow.
type NodeInfo struct {
	Name   string
	JobID  ulid.ULID // zero for a group
	Group  bool
	Policy Policy
	Needs  []string
	In     string // the group or spawner it is attached to
	// JobState is its job's state ("" for a group, or a job deleted or pruned).
	JobState State
	// Own is how the node itself ended: ok, fail, cancel, del (its job's end), or dfail,
	// dcancel, skip, cancel (decided without a run); "" while it has not.
	Own string
	// Outcome is what the nodes that need it see, once it and everything attached to it
	// ended: Own, or fail or cancel when an attached node failed or was cancelled.
	Outcome string
	// Waiting is how many of what it needs have not ended; Holds how many attached nodes.
	Waiting, Holds int
}

// Workflow returns workflow id; ErrWorkflowNotFound when there is none.
func (q *Queue) Workflow(ctx context.Context, id ulid.ULID) (*WorkflowInfo, error) {
	row, err := q.q.WorkflowByID(ctx, q.pool, uuidOf(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrWorkflowNotFound
	}
	if err != nil {
		return nil, err
	}
	return &WorkflowInfo{ID: ulidOf(row.ID), Name: row.Name, Key: row.Key, State: WorkflowState(row.State),
		FailFast: row.FailFast, Attempt: int(row.Attempt), Nodes: int(row.Nodes), OpenNodes: int(row.OpenNodes),
		CancelNote: row.CancelNote, CreatedAt: row.CreatedAt, FinishedAt: row.FinishedAt}, nil
}

// WorkflowNodes returns up to limit nodes of workflow id whose names sort after after, in
// name order (the next page starts after the last name). An unknown workflow has none.
func (q *Queue) WorkflowNodes(ctx context.Context, id ulid.ULID, after string, limit int) ([]NodeInfo, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	rows, err := q.q.WorkflowNodes(ctx, q.pool, dbsqlc.WorkflowNodesParams{WorkflowID: uuidOf(id), After: after, Max: int32(limit)})
	if err != nil {
		return nil, err
	}
	out := make([]NodeInfo, 0, len(rows))
	for _, r := range rows {
		n := NodeInfo{Name: r.Node, Group: !r.JobID.Valid, Policy: Policy(r.Policy), Needs: r.Deps, In: r.Parent,
			JobState: State(r.JobState), Own: r.Own, Outcome: r.Outcome, Waiting: int(r.Waiting), Holds: int(r.Holds)}
		if r.JobID.Valid {
			n.JobID = ulidOf(r.JobID)
		}
		out = append(out, n)
	}
	return out, nil
}

// SealGroup seals an open group of workflow id: it takes no more members, and what needs
// it runs once its members have ended. ErrWorkflowFinished when the group is not open.
func (q *Queue) SealGroup(ctx context.Context, id ulid.ULID, group string) error {
	sealed, err := q.q.SealWorkflowGroup(ctx, q.pool, dbsqlc.SealWorkflowGroupParams{ID: uuidOf(id), Node: group, Channel: q.notifyChannel()})
	if err != nil {
		return err
	}
	if !sealed {
		return fmt.Errorf("%w: no open group %q", ErrWorkflowFinished, group)
	}
	return nil
}

// CancelWorkflow cancels workflow id, journaling reason: its blocked nodes end cancelled
// at once, its released jobs are cancelled as [Queue.Cancel] cancels a job (a running one
// is asked to stop, and ends cancelled unless it completes first), and nothing added to
// it later runs. It returns when every released job has been cancelled or asked to stop.
// ErrWorkflowFinished when the workflow is not open.
func (q *Queue) CancelWorkflow(ctx context.Context, id ulid.ULID, reason string) error {
	note := cancelNote(reason)
	running, err := q.q.CancelWorkflow(ctx, q.pool, dbsqlc.CancelWorkflowParams{ID: uuidOf(id), Note: note, Channel: q.notifyChannel()})
	if err != nil {
		return err
	}
	if running == nil {
		return ErrWorkflowFinished
	}
	for _, u := range running { // in ID order: the lock order
		_, err := q.Cancel(ctx, ulidOf(u), note)
		if err != nil && !errors.Is(err, ErrJobFinished) && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}
