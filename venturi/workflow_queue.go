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

	"github.com/venturi-dev/venturi/internal/awaiter"
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
		res, err = q.enqueueWorkflow(ctx, tx, w, false)
		return err
	})
	return res, err
}

// EnqueueWorkflowTx is EnqueueWorkflow in the caller's transaction, which must be READ
// COMMITTED (ErrIsolation otherwise): the workflow exists, and its roots can run, once tx
// commits.
func (q *Queue) EnqueueWorkflowTx(ctx context.Context, tx pgx.Tx, w *Workflow) (WorkflowResult, error) {
	if err := q.checkReadCommitted(ctx, tx, "EnqueueWorkflowTx"); err != nil {
		return WorkflowResult{}, err
	}
	return q.enqueueWorkflow(ctx, tx, w, true)
}

// checkReadCommitted refuses a nil transaction, and one that is not READ COMMITTED
// (ErrIsolation): a settle in a snapshot older than its statement could miss a change
// another transaction committed meanwhile.
func (q *Queue) checkReadCommitted(ctx context.Context, tx pgx.Tx, call string) error {
	if tx == nil {
		return fmt.Errorf("venturi: %s needs a transaction", call)
	}
	iso, err := q.q.TransactionIsolation(ctx, tx)
	if err != nil {
		return err
	}
	if iso != "read committed" {
		return fmt.Errorf("%w (%s; the transaction is %s)", ErrIsolation, call, iso)
	}
	return nil
}

// The kinds of venturi_workflow rows.
const (
	workflowKindGraph int16 = 0
	workflowKindBatch int16 = 1
)

// wfNodeRow is a node as InsertWorkflowNodes reads it.
type wfNodeRow struct {
	Node     string   `json:"node"`
	JobID    string   `json:"job_id,omitempty"`
	Policy   Policy   `json:"policy"`
	Deps     []string `json:"deps"`
	Parent   *string  `json:"parent,omitempty"`
	Sealed   bool     `json:"sealed"`
	Released bool     `json:"released"`
	DelayUs  int64    `json:"delay_us"`
}

func (q *Queue) enqueueWorkflow(ctx context.Context, tx pgx.Tx, w *Workflow, inTx bool) (WorkflowResult, error) {
	if w == nil {
		return WorkflowResult{}, fmt.Errorf("%w: nil workflow", ErrWorkflowInvalid)
	}
	return q.enqueueGraph(ctx, tx, w, workflowKindGraph, inTx)
}

// enqueueGraph writes w as a venturi_workflow row of kind (a workflow, a batch); inTx: in
// the caller's transaction.
func (q *Queue) enqueueGraph(ctx context.Context, tx pgx.Tx, w *Workflow, kind int16, inTx bool) (WorkflowResult, error) {
	if err := w.validate(nil); err != nil {
		return WorkflowResult{}, err
	}
	// Prepare every job before writing anything. A root is released as it is written.
	res := WorkflowResult{ID: ulid.Make(), Action: ActionInserted}
	g, err := w.rows(q.preparer(ctx, inTx), graphPlace{workflow: res.ID, releaseRoots: true})
	if err != nil {
		return WorkflowResult{}, err
	}
	res.Jobs = g.ids
	ids, err := q.q.InsertWorkflow(ctx, tx, dbsqlc.InsertWorkflowParams{ID: uuidOf(res.ID), Kind: kind, Name: w.name, Key: w.key, FailFast: w.failFast})
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
	b := &pgx.Batch{}
	if err := g.queue(b, uuidOf(res.ID)); err != nil {
		return WorkflowResult{}, err
	}
	dbsqlc.QueueSettleWorkflows(b, dbsqlc.SettleWorkflowsParams{Ids: []pgtype.UUID{uuidOf(res.ID)}, Channel: q.notifyChannel()})
	if !q.poll {
		for payload := range g.notify {
			dbsqlc.QueueNotify(b, dbsqlc.NotifyParams{Channel: q.channel, Payload: payload})
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return WorkflowResult{}, fmt.Errorf("venturi: write workflow: %w", err)
	}
	return res, nil
}

// graphRows are a workflow's nodes and jobs as the statements that insert them take
// them.
type graphRows struct {
	nodes    []wfNodeRow
	jobs     dbsqlc.InsertJobsParams
	released []bool
	notify   map[string]bool // the released jobs' wake-ups
	ids      map[string]ulid.ULID
}

// graphPlace is where a graph's nodes go: their workflow, a prefix put before every node
// name (a spawn's nodes are named after their spawner), the node that the nodes without
// a group are attached to (a spawner; "" for none), the metadata every job inherits (a
// spawner's), and whether the nodes that need nothing are released as they are written
// (an enqueue) or left to the settle that follows in the same transaction (nodes added to
// a running workflow, which may be being cancelled).
type graphPlace struct {
	workflow     ulid.ULID
	prefix       string
	attach       string
	inherit      Meta
	releaseRoots bool
}

// Metadata keys of a workflow's jobs, set on each as it is enqueued (see [Meta]): the
// workflow's ID and the job's node. Middleware, events and the OpenTelemetry spans read
// them; a spawned job also inherits its spawner's other keys (a trace's context, a
// tenant).
const (
	MetaWorkflow = "venturi.workflow"
	MetaNode     = "venturi.node"
)

// rows prepares w's nodes and jobs with prep, placed as at says.
func (w *Workflow) rows(prep func(Task, []EnqueueOption) (*plan, error), at graphPlace) (*graphRows, error) {
	prefix, attach, releaseRoots := at.prefix, at.attach, at.releaseRoots
	g := &graphRows{notify: map[string]bool{}, ids: map[string]ulid.ULID{}}
	local := func(name string) string {
		if prefix != "" && w.byName[name] != nil {
			return prefix + name
		}
		return name
	}
	for _, n := range w.nodes {
		row := wfNodeRow{Node: prefix + n.name, Policy: n.policy, Deps: []string{}, Sealed: n.task != nil || !n.open, DelayUs: delayOf(n.delay)}
		for _, d := range n.deps {
			row.Deps = append(row.Deps, local(d))
		}
		switch {
		case n.parent != "":
			p := local(n.parent)
			row.Parent = &p
		case attach != "":
			row.Parent = &attach
		}
		if n.task != nil {
			// The inherited metadata first (the node's own wins), the workflow's keys last.
			opts := append([]EnqueueOption{WithMeta(at.inherit)}, n.opts...)
			opts = append(opts, WithMeta(Meta{MetaWorkflow: at.workflow.String(), MetaNode: row.Node}))
			p, err := prep(n.task, opts)
			if err != nil {
				return nil, fmt.Errorf("node %q: %w", n.name, err)
			}
			row.JobID = uuidText(p.id)
			row.Released = releaseRoots && len(n.deps) == 0
			g.ids[row.Node] = p.id
			delay := p.opts.delay
			if row.Released {
				delay += n.delay
			}
			appendJob(&g.jobs, p, delay)
			g.released = append(g.released, row.Released)
			if row.Released {
				g.notify[notifyPayload(p.kind, p.dueNow() && n.delay <= 0)] = true
			}
		}
		g.nodes = append(g.nodes, row)
	}
	return g, nil
}

// queue adds to b the statements that insert g into workflow id.
func (g *graphRows) queue(b *pgx.Batch, id pgtype.UUID) error {
	nodesJSON, err := json.Marshal(g.nodes)
	if err != nil {
		return err
	}
	plain := g.jobs
	dbsqlc.QueueInsertWorkflowNodes(b, dbsqlc.InsertWorkflowNodesParams{WorkflowID: id, Nodes: string(nodesJSON)})
	dbsqlc.QueueInsertWorkflowJobs(b, dbsqlc.InsertWorkflowJobsParams{WorkflowID: id, Ids: plain.Ids, Kinds: plain.Kinds,
		Queues: plain.Queues, Priorities: plain.Priorities, Payloads: plain.Payloads, HasAt: plain.HasAt, Ats: plain.Ats,
		DelaysUs: plain.DelaysUs, HasPart: plain.HasPart, Parts: plain.Parts, SlotKeys: plain.SlotKeys,
		SlotLimits: plain.SlotLimits, SlotPolicies: plain.SlotPolicies, Events: plain.Events, Metas: plain.Metas,
		Released: g.released})
	return nil
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
// It is audited (AuditWorkflowSeal, target "ID/group").
func (q *Queue) SealGroup(ctx context.Context, id ulid.ULID, group string) error {
	return pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		sealed, err := q.q.SealWorkflowGroup(ctx, tx, dbsqlc.SealWorkflowGroupParams{ID: uuidOf(id), Node: group, Channel: q.notifyChannel()})
		if err != nil {
			return err
		}
		if !sealed {
			return fmt.Errorf("%w: no open group %q", ErrWorkflowFinished, group)
		}
		_, err = q.audit(ctx, tx, AuditWorkflowSeal, id.String()+"/"+group, 1, "")
		return err
	})
}

// CancelWorkflow cancels workflow id, journaling reason: its blocked nodes end cancelled
// at once, its released jobs are cancelled as [Queue.Cancel] cancels a job (a running one
// is asked to stop, and ends cancelled unless it completes first), and nothing added to
// it later runs, all in one transaction, audited (AuditWorkflowCancel, counting the jobs
// it cancelled or asked to stop). ErrWorkflowFinished when the workflow is not open.
func (q *Queue) CancelWorkflow(ctx context.Context, id ulid.ULID, reason string) error {
	note := cancelNote(reason)
	return pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		// The workflow's row first, then its jobs' in ID order: the lock order.
		running, err := q.q.CancelWorkflow(ctx, tx, dbsqlc.CancelWorkflowParams{ID: uuidOf(id), Note: note, Channel: q.notifyChannel()})
		if err != nil {
			return err
		}
		if running == nil {
			return ErrWorkflowFinished
		}
		var n int64
		if len(running) > 0 {
			if n, err = cancelJobs(ctx, tx, q.q, q.notifyChannel(), running, note); err != nil {
				return err
			}
		}
		_, err = q.audit(ctx, tx, AuditWorkflowCancel, id.String(), n, reason)
		return err
	})
}

// AddToWorkflow adds the nodes of w to open workflow id, in one transaction, and returns
// their jobs' IDs by node name. w's nodes may need the workflow's nodes (name them with
// [NodeNamed]) and join its open groups (In(NodeNamed(group))); its name, key and options
// are not used. A node whose needs allow it runs at once; in a workflow being cancelled,
// the added nodes end cancelled. ErrWorkflowFinished when the workflow is not open,
// ErrWorkflowNotFound when there is none, ErrWorkflowInvalid for a graph it refuses.
func (q *Queue) AddToWorkflow(ctx context.Context, id ulid.ULID, w *Workflow) (map[string]ulid.ULID, error) {
	var ids map[string]ulid.ULID
	err := pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		ids, err = q.addToWorkflow(ctx, tx, id, w, workflowKindGraph, false)
		return err
	})
	return ids, err
}

// AddToWorkflowTx is AddToWorkflow in the caller's READ COMMITTED transaction (a
// handler's, to add nodes atomically with its own writes): tx holds the workflow's row
// until it ends.
func (q *Queue) AddToWorkflowTx(ctx context.Context, tx pgx.Tx, id ulid.ULID, w *Workflow) (map[string]ulid.ULID, error) {
	if err := q.checkReadCommitted(ctx, tx, "AddToWorkflowTx"); err != nil {
		return nil, err
	}
	return q.addToWorkflow(ctx, tx, id, w, workflowKindGraph, true)
}

// addToWorkflow adds w's nodes to workflow id, which must be of kind, in tx (the
// caller's: inTx).
func (q *Queue) addToWorkflow(ctx context.Context, tx pgx.Tx, id ulid.ULID, w *Workflow, kind int16, inTx bool) (map[string]ulid.ULID, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: nil workflow", ErrWorkflowInvalid)
	}
	row, err := q.q.LockWorkflow(ctx, tx, uuidOf(id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, ErrWorkflowNotFound
	case err != nil:
		return nil, err
	case row.Kind != kind && kind == workflowKindBatch:
		return nil, ErrNotBatch
	case row.Kind != kind:
		return nil, fmt.Errorf("%w: it is a batch (AddToBatch adds to it)", ErrWorkflowInvalid)
	case row.State != string(WorkflowOpen):
		return nil, ErrWorkflowFinished
	}
	graph, err := q.q.WorkflowGraph(ctx, tx, uuidOf(id))
	if err != nil {
		return nil, err
	}
	if err := w.validate(graph); err != nil {
		return nil, err
	}
	g, err := w.rows(q.preparer(ctx, inTx), graphPlace{workflow: id})
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	if err := g.queue(b, uuidOf(id)); err != nil {
		return nil, err
	}
	dbsqlc.QueueSettleWorkflowTouch(b, dbsqlc.SettleWorkflowTouchParams{ID: uuidOf(id), Channel: q.notifyChannel()})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("venturi: add to workflow: %w", err)
	}
	return g.ids, nil
}

// RetryWorkflow runs workflow id again from where it failed: the jobs whose runs failed
// or were cancelled go back, blocked, to run once what they need allows (at once, when
// it completed), and the nodes that were decided without a run because of them (an
// upstream failure, the workflow's cancel, a fail-fast) are decided again; what
// completed is not run again. A cancel in force (a fail-fast's too) is lifted, and the
// workflow's attempt counted. It returns how many jobs it retried (0: nothing failed or
// was cancelled). It is audited (AuditWorkflowRetry). ErrWorkflowNotFound when there is
// no such workflow.
func (q *Queue) RetryWorkflow(ctx context.Context, id ulid.ULID, reason string) (int, error) {
	note := joinNote("workflow retried", reason)
	retried := 0
	err := pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		row, err := q.q.RetryWorkflowBegin(ctx, tx, uuidOf(id))
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrWorkflowNotFound
		}
		if err != nil {
			return err
		}
		retried = 0
		if len(row.Jobs) > 0 {
			err = untilSettled(row.Jobs, func(ids []pgtype.UUID) ([]pgtype.UUID, error) {
				r, err := q.q.RetryJobs(ctx, tx, dbsqlc.RetryJobsParams{Ids: ids, Note: cleanNote(note)})
				retried += int(r.Changed)
				return r.Ids, err
			})
			if err != nil {
				return err
			}
		}
		if _, err = q.q.SettleWorkflowTouch(ctx, tx, dbsqlc.SettleWorkflowTouchParams{ID: uuidOf(id), Channel: q.notifyChannel(), Touch: row.Touch}); err != nil {
			return err
		}
		_, err = q.audit(ctx, tx, AuditWorkflowRetry, id.String(), int64(retried), reason)
		return err
	})
	return retried, err
}

// AwaitWorkflow waits until workflow id has finished (succeeded, failed or cancelled) and
// returns it, from any process, as [Queue.Await] waits for a job: a notification when it
// finishes, and a poll every [AwaitPoll] behind it. It returns ctx's error when ctx ends
// first, and ErrWorkflowNotFound for an unknown workflow or one pruned before it was read.
func (q *Queue) AwaitWorkflow(ctx context.Context, id ulid.ULID) (*WorkflowInfo, error) {
	return awaitEnd(ctx, q, q.workflowAwaiter(), id,
		func(ctx context.Context) (*WorkflowInfo, bool, error) {
			w, err := q.Workflow(ctx, id)
			return w, err == nil && w.State != WorkflowOpen, err
		},
		func(ctx context.Context) error {
			_, err := q.q.AwaitWorkflow(ctx, q.pool, dbsqlc.AwaitWorkflowParams{Channel: q.doneChannel, ID: uuidOf(id)})
			return err
		})
}

// workflowAwaiter returns the Queue's awaiter of workflows (internal/awaiter), as
// Queue.awaiter is for jobs.
func (q *Queue) workflowAwaiter() *awaiter.Awaiter {
	q.awaitWfOnce.Do(func() {
		cfg := awaiter.Config{
			Channel: q.doneChannel, Prefix: awaiter.WorkflowPrefix, Poll: AwaitPoll, Linger: notifyLinger,
			Ended: func(ctx context.Context, ids []pgtype.UUID) ([]pgtype.UUID, error) {
				return q.q.EndedWorkflows(ctx, q.pool, ids)
			},
		}
		if !q.poll {
			cfg.Notifier = q.notifier()
		}
		q.awaitWf = awaiter.New(cfg)
	})
	return q.awaitWf
}

// WorkflowOutput decodes into v the output that node of workflow id stored when it
// completed ([Run.SetOutput]); ErrNoOutput when it has none (it has not completed, or
// stored none).
func (q *Queue) WorkflowOutput(ctx context.Context, id ulid.ULID, node string, v any) error {
	b, err := q.q.WorkflowOutput(ctx, q.pool, dbsqlc.WorkflowOutputParams{WorkflowID: uuidOf(id), Node: node})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: node %q", ErrNoOutput, node)
	}
	if err != nil {
		return err
	}
	return decodeOutput(node, b, v)
}

// stopCancelledMembers cancels, as [Queue.Cancel] does, a batch of the released members
// that have not ended of the workflows being cancelled (CancellingMembers): a fail-fast
// trips in a settle, which cannot stop a running job, and a CancelWorkflow's caller may
// stop before it cancelled them all. One transaction (inHotTx: its plans reach rows by
// index, and it may not idle longer than idle) locks them all in ID order first. It
// returns how many it cancelled or asked to stop.
func stopCancelledMembers(ctx context.Context, db beginner, q *dbsqlc.Queries, channel string, idle time.Duration) (int, error) {
	total := 0
	err := inHotTx(ctx, db, idle, func(tx pgx.Tx) error {
		rows, err := q.CancellingMembers(ctx, tx, 1000)
		if err != nil || len(rows) == 0 {
			return err
		}
		all := make([]pgtype.UUID, len(rows))
		byNote := map[string][]pgtype.UUID{}
		var notes []string
		for i, r := range rows { // in ID order
			all[i] = r.ID
			if byNote[r.Note] == nil {
				notes = append(notes, r.Note)
			}
			byNote[r.Note] = append(byNote[r.Note], r.ID)
		}
		if _, err := q.LockJobs(ctx, tx, all); err != nil {
			return err
		}
		for _, note := range notes {
			n, err := cancelJobs(ctx, tx, q, channel, byNote[note], note)
			if err != nil {
				return err
			}
			total += int(n)
		}
		return nil
	})
	return total, err
}
