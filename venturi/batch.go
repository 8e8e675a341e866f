package venturi

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Batches: a set of jobs with callbacks (see the README, "Batches"). A batch is a
// workflow of kind 1: a group of members (BatchMembers) and up to three callback nodes
// that need it, each a job released once by the workflow's rules.

// Node names of a batch's workflow.
const (
	// BatchMembers is the group a batch's members join; a member's node is its job's ID.
	BatchMembers = "members"
	// BatchOnSuccess, BatchOnEnd and BatchOnFailure are its callbacks' nodes.
	BatchOnSuccess = "on_success"
	BatchOnEnd     = "on_end"
	BatchOnFailure = "on_failure"
)

// ErrNotBatch: the workflow is not a batch.
var ErrNotBatch = errors.New("venturi: not a batch")

// Batch is a set of jobs with callbacks: OnSuccess runs once every member completed,
// OnEnd once every member ended whatever its outcome, OnFailure at the first member's
// failure (each at most once; a callback whose condition cannot hold any more ends
// cancelled without a run: skipped, or upstream_failed). Build it with NewBatch and Add,
// enqueue it with [Queue.EnqueueBatch]. An open batch (OpenBatch) takes members from
// anywhere with [Queue.AddToBatch] until [Queue.SealBatch]; its callbacks wait for the
// seal. A Batch is not safe for concurrent use.
type Batch struct {
	w       *Workflow
	members Node
	n       int
	open    bool
	onSuc   Task
	onEnd   Task
	onFail  Task
	built   bool
}

// BatchOption configures a batch.
type BatchOption interface {
	applyBatch(*Batch)
}

type batchOptionFunc func(*Batch)

func (f batchOptionFunc) applyBatch(b *Batch) { f(b) }

// OnSuccess runs t once every member completed (an empty sealed batch: at once).
func OnSuccess(t Task) BatchOption { return batchOptionFunc(func(b *Batch) { b.onSuc = t }) }

// OnEnd runs t once every member ended, whatever its outcome.
func OnEnd(t Task) BatchOption { return batchOptionFunc(func(b *Batch) { b.onEnd = t }) }

// OnFailure runs t as soon as a member fails (dead); it is skipped when none does.
func OnFailure(t Task) BatchOption { return batchOptionFunc(func(b *Batch) { b.onFail = t }) }

// OpenBatch keeps the batch open for members added later ([Queue.AddToBatch]) until
// [Queue.SealBatch]; the callbacks wait for the seal.
func OpenBatch() BatchOption { return batchOptionFunc(func(b *Batch) { b.open = true }) }

// BatchKey makes the enqueue idempotent as [WorkflowKey] does (batches and workflows
// share the keys' namespace).
func BatchKey(key string) BatchOption {
	return batchOptionFunc(func(b *Batch) { b.w.key = key })
}

// NewBatch returns an empty batch named name.
func NewBatch(name string, opts ...BatchOption) *Batch {
	b := &Batch{w: NewWorkflow(name)}
	var gopts []NodeOption
	for _, o := range opts {
		if o != nil {
			o.applyBatch(b)
		}
	}
	if b.open {
		gopts = append(gopts, OpenGroup())
	}
	b.members = b.w.Group(BatchMembers, gopts...)
	return b
}

// Add adds a member that runs t (with opts: At, After, OnQueue, WithMeta, WithEvents; its
// dedup key is ignored) and returns its job's ID, which is also its node's name.
func (b *Batch) Add(t Task, opts ...EnqueueOption) ulid.ULID {
	id := ulid.Make()
	b.w.Add(id.String(), t, In(b.members), With(append(opts, withID(id))...))
	b.n++
	return id
}

// build adds the callbacks once.
func (b *Batch) build() *Workflow {
	if !b.built {
		b.built = true
		for _, c := range []struct {
			name string
			t    Task
			opt  func(...Node) NodeOption
		}{{BatchOnSuccess, b.onSuc, Needs}, {BatchOnEnd, b.onEnd, NeedsEnded}, {BatchOnFailure, b.onFail, NeedsFailure}} {
			if c.t != nil {
				b.w.Add(c.name, c.t, c.opt(b.members))
			}
		}
	}
	return b.w
}

// BatchResult is what EnqueueBatch did.
type BatchResult struct {
	// ID is the batch's ID (its workflow's).
	ID ulid.ULID
	// Action is ActionInserted, or ActionKept when an open batch or workflow had the key.
	Action Action
}

// EnqueueBatch writes b in one transaction: the batch, its members (due at once, or at
// their At or After) and its callbacks (blocked until their condition holds).
func (q *Queue) EnqueueBatch(ctx context.Context, b *Batch) (BatchResult, error) {
	var res BatchResult
	err := pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		res, err = q.enqueueBatch(ctx, tx, b, false)
		return err
	})
	return res, err
}

// EnqueueBatchTx is EnqueueBatch in the caller's READ COMMITTED transaction.
func (q *Queue) EnqueueBatchTx(ctx context.Context, tx pgx.Tx, b *Batch) (BatchResult, error) {
	if err := q.checkReadCommitted(ctx, tx, "EnqueueBatchTx"); err != nil {
		return BatchResult{}, err
	}
	return q.enqueueBatch(ctx, tx, b, true)
}

func (q *Queue) enqueueBatch(ctx context.Context, tx pgx.Tx, b *Batch, inTx bool) (BatchResult, error) {
	if b == nil {
		return BatchResult{}, fmt.Errorf("%w: nil batch", ErrWorkflowInvalid)
	}
	r, err := q.enqueueGraph(ctx, tx, b.build(), workflowKindBatch, inTx)
	return BatchResult{ID: r.ID, Action: r.Action}, err
}

// AddToBatch adds members running tasks to open batch id, and returns their jobs' IDs:
// they are due at once. ErrWorkflowFinished when the batch is sealed or finished,
// ErrNotBatch when id is a workflow.
func (q *Queue) AddToBatch(ctx context.Context, id ulid.ULID, tasks ...Task) ([]ulid.ULID, error) {
	var ids []ulid.ULID
	err := pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		ids, err = q.addToBatch(ctx, tx, id, tasks, false)
		return err
	})
	return ids, err
}

// AddToBatchTx is AddToBatch in the caller's READ COMMITTED transaction (a handler's, to
// add members atomically with its own writes): the members exist, and run, once tx
// commits; tx holds the batch's row until then.
func (q *Queue) AddToBatchTx(ctx context.Context, tx pgx.Tx, id ulid.ULID, tasks ...Task) ([]ulid.ULID, error) {
	if err := q.checkReadCommitted(ctx, tx, "AddToBatchTx"); err != nil {
		return nil, err
	}
	return q.addToBatch(ctx, tx, id, tasks, true)
}

func (q *Queue) addToBatch(ctx context.Context, tx pgx.Tx, id ulid.ULID, tasks []Task, inTx bool) ([]ulid.ULID, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	w := NewWorkflow("")
	ids := make([]ulid.ULID, len(tasks))
	for i, t := range tasks {
		ids[i] = ulid.Make()
		w.Add(ids[i].String(), t, In(NodeNamed(BatchMembers)), With(withID(ids[i])))
	}
	if _, err := q.addToWorkflow(ctx, tx, id, w, workflowKindBatch, inTx); err != nil {
		if errors.Is(err, errNotOpenGroup) {
			return nil, fmt.Errorf("%w: the batch is sealed", ErrWorkflowFinished)
		}
		return nil, err
	}
	return ids, nil
}

// SealBatch seals open batch id: it takes no more members, and its callbacks run once
// their condition holds. ErrWorkflowFinished when it is not open.
func (q *Queue) SealBatch(ctx context.Context, id ulid.ULID) error {
	return q.SealGroup(ctx, id, BatchMembers)
}

// BatchInfo is a batch's state and its members' outcomes, counted from its nodes as
// they stand.
type BatchInfo struct {
	ID     ulid.ULID
	State  WorkflowState // open until the members and callbacks ended
	Sealed bool          // takes no more members
	// Total counts the members; Succeeded, Failed and Cancelled those that ended so (a
	// member that spawned counts with what it spawned); Pending the others.
	Total, Succeeded, Failed, Cancelled, Pending int
}

// Batch returns batch id's counts; ErrWorkflowNotFound when there is none, ErrNotBatch
// when id is a workflow.
func (q *Queue) Batch(ctx context.Context, id ulid.ULID) (*BatchInfo, error) {
	return batchInfo(ctx, q.q, q.pool, id)
}

func batchInfo(ctx context.Context, q *dbsqlc.Queries, db dbsqlc.DBTX, id ulid.ULID) (*BatchInfo, error) {
	r, err := q.BatchCounts(ctx, db, dbsqlc.BatchCountsParams{ID: uuidOf(id), Members: BatchMembers})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrWorkflowNotFound
	}
	if err != nil {
		return nil, err
	}
	if r.Kind != workflowKindBatch {
		return nil, ErrNotBatch
	}
	return &BatchInfo{ID: id, State: WorkflowState(r.State), Sealed: r.Sealed, Total: int(r.Total),
		Succeeded: int(r.Succeeded), Failed: int(r.Failed), Cancelled: int(r.Cancelled),
		Pending: int(r.Total - r.Succeeded - r.Failed - r.Cancelled)}, nil
}

// Batch returns the counts of the batch the run's job is a member or callback of, as
// they stand (a callback sees them final, but OnFailure's, which runs at the first
// failure); ErrNotInWorkflow outside workflows, ErrNotBatch in a workflow. The members'
// outputs are the callback's [Run.UpstreamOutputs].
func (r *Run[C]) Batch(ctx context.Context) (*BatchInfo, error) {
	n, err := r.nodeOf(ctx)
	if err != nil {
		return nil, err
	}
	return r.flows.batch(ctx, ulidOf(n.WorkflowID))
}
