package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/jobrun"
)

// A workflow member's run: its node, the outputs it reads and stores, the nodes it
// spawns (see the README, "Workflows: outputs and fan-out at run time").

// MaxOutputBytes bounds a run's output, as encoded JSON ([Run.SetOutput]): what a fan-in
// reads is every output upstream of it, so outputs are meant to be results, not bulk data
// (store that elsewhere and output its reference).
const MaxOutputBytes = 256 << 10

var (
	// ErrNoOutput: the node has no output (it has not completed, or its run stored none).
	ErrNoOutput = errors.New("venturi: no output")
	// ErrNotInWorkflow: the run's job is not a member of a workflow.
	ErrNotInWorkflow = errors.New("venturi: the job is not in a workflow")
)

// flowAccess is what a run's workflow calls read: the database in a worker (dbFlows), the
// test's options in venturitest (testFlows).
type flowAccess interface {
	// node returns the job's workflow and node; pgx.ErrNoRows outside workflows.
	node(ctx context.Context, job ulid.ULID) (*dbsqlc.NodeOfJobRow, error)
	// output returns a node's output; pgx.ErrNoRows when it has none.
	output(ctx context.Context, workflow pgtype.UUID, node string) ([]byte, error)
	// upstream returns the outputs the job's node can read, by node.
	upstream(ctx context.Context, job ulid.ULID) (map[string]json.RawMessage, error)
	// batch returns a batch's counts.
	batch(ctx context.Context, id ulid.ULID) (*BatchInfo, error)
}

// dbFlows is a worker's flowAccess: its database.
type dbFlows struct {
	db dbsqlc.DBTX
	q  *dbsqlc.Queries
}

func (f *dbFlows) node(ctx context.Context, job ulid.ULID) (*dbsqlc.NodeOfJobRow, error) {
	return f.q.NodeOfJob(ctx, f.db, uuidOf(job))
}

func (f *dbFlows) output(ctx context.Context, workflow pgtype.UUID, node string) ([]byte, error) {
	return f.q.WorkflowOutput(ctx, f.db, dbsqlc.WorkflowOutputParams{WorkflowID: workflow, Node: node})
}

func (f *dbFlows) upstream(ctx context.Context, job ulid.ULID) (map[string]json.RawMessage, error) {
	rows, err := f.q.UpstreamOutputs(ctx, f.db, uuidOf(job))
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(rows))
	for _, row := range rows {
		out[row.Node] = row.Output
	}
	return out, nil
}

func (f *dbFlows) batch(ctx context.Context, id ulid.ULID) (*BatchInfo, error) {
	return batchInfo(ctx, f.q, f.db, id)
}

// runFlow is what a run records for its workflow: its output and spawns, written with
// its completion, and its node, read once.
type runFlow struct {
	output  []byte
	node    *dbsqlc.NodeOfJobRow // nil until looked up
	spawned []*graphRows
	names   map[string]bool // the spawned nodes' names (how many it spawned)
}

// SetOutput records v's JSON encoding as this run's output: when the run completes, it
// is stored for the job's workflow node, in the transaction that records the completion,
// for the nodes downstream ([Run.Output], [Run.UpstreamOutputs]) and
// [Queue.WorkflowOutput]. A run that does not complete stores nothing; the last call
// wins; a job outside workflows stores nothing. It refuses an output larger than
// [MaxOutputBytes].
func (r *Run[C]) SetOutput(v any) error {
	b, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("venturi: output: %w", err)
	}
	if len(b) > MaxOutputBytes {
		return fmt.Errorf("venturi: output of %d bytes exceeds the limit of %d (MaxOutputBytes)", len(b), MaxOutputBytes)
	}
	r.flow.output = b
	return nil
}

// Workflow returns the workflow the run's job is a member of and its node's name;
// ErrNotInWorkflow for a job outside workflows.
func (r *Run[C]) Workflow(ctx context.Context) (id ulid.ULID, node string, err error) {
	n, err := r.nodeOf(ctx)
	if err != nil {
		return ulid.ULID{}, "", err
	}
	return ulidOf(n.WorkflowID), n.Node, nil
}

func (r *Run[C]) nodeOf(ctx context.Context) (*dbsqlc.NodeOfJobRow, error) {
	if r.flow.node != nil {
		return r.flow.node, nil
	}
	if r.flows == nil {
		return nil, errors.New("venturi: workflow calls outside a worker's run")
	}
	n, err := r.flows.node(ctx, r.id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotInWorkflow
	}
	if err != nil {
		return nil, err
	}
	r.flow.node = n
	return n, nil
}

// Output decodes into v the output of node of the run's workflow (any node, typically
// one it needs); ErrNoOutput when that node has none, ErrNotInWorkflow outside workflows.
func (r *Run[C]) Output(ctx context.Context, node string, v any) error {
	n, err := r.nodeOf(ctx)
	if err != nil {
		return err
	}
	b, err := r.flows.output(ctx, n.WorkflowID, node)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: node %q", ErrNoOutput, node)
	}
	if err != nil {
		return err
	}
	return decodeOutput(node, b, v)
}

// UpstreamOutputs returns, by node name, the outputs of the nodes the run's node needs
// and of every node attached to them at any depth (a group's members, a spawner's
// children): what a fan-in reads. Nodes without an output are absent. ErrNotInWorkflow
// outside workflows.
func (r *Run[C]) UpstreamOutputs(ctx context.Context) (map[string]json.RawMessage, error) {
	if _, err := r.nodeOf(ctx); err != nil {
		return nil, err
	}
	return r.flows.upstream(ctx, r.id)
}

// Spawn attaches the nodes of w to the run's node, to be written in the transaction that
// records the run's completion: what needs this node then waits for them as well, and
// cannot start before they exist. Their names are the spawner's, a slash and their own
// ("fetch/page-1"); they may need one another and join w's groups, not other nodes of the
// workflow. It returns their jobs' IDs by (full) name. A run that does not complete
// spawns nothing (a retry spawns again); one whose spawns the database refuses ends dead,
// noted. Spawn may be called more than once in a run, up to MaxWorkflowNodes nodes.
// ErrNotInWorkflow outside workflows, ErrWorkflowInvalid for a graph it refuses.
func (r *Run[C]) Spawn(ctx context.Context, w *Workflow) (map[string]ulid.ULID, error) {
	if w == nil {
		return nil, fmt.Errorf("%w: nil workflow", ErrWorkflowInvalid)
	}
	n, err := r.nodeOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.validate(nil); err != nil {
		return nil, err
	}
	prefix := n.Node + "/"
	if r.flow.names == nil {
		r.flow.names = map[string]bool{}
	}
	for _, c := range w.nodes {
		name := prefix + c.name
		switch {
		case len(name) > MaxNodeNameBytes:
			return nil, fmt.Errorf("%w: spawned node %q: its full name is longer than %d bytes", ErrWorkflowInvalid, name, MaxNodeNameBytes)
		case r.flow.names[name]:
			return nil, fmt.Errorf("%w: node %q spawned twice", ErrWorkflowInvalid, name)
		}
	}
	if len(r.flow.names)+len(w.nodes) > MaxWorkflowNodes {
		return nil, fmt.Errorf("%w: more than %d nodes spawned by one run", ErrWorkflowInvalid, MaxWorkflowNodes)
	}
	inherit := maps.Clone(r.meta)
	delete(inherit, MetaWorkflow)
	delete(inherit, MetaNode)
	g, err := w.rows(prepare, graphPlace{workflow: ulidOf(n.WorkflowID), prefix: prefix, attach: n.Node, inherit: inherit})
	if err != nil {
		return nil, err
	}
	for _, c := range g.nodes {
		r.flow.names[c.Node] = true
	}
	r.flow.spawned = append(r.flow.spawned, g)
	return g.ids, nil
}

// flowEnd returns what the run's completion writes beside its end (nil: nothing).
func (r *Run[C]) flowEnd() *jobrun.Flow {
	if r.flow.output == nil && len(r.flow.spawned) == 0 {
		return nil
	}
	f := &jobrun.Flow{Output: r.flow.output}
	if len(r.flow.spawned) > 0 {
		id := r.flow.node.WorkflowID
		spawned := r.flow.spawned
		f.Workflow = id
		f.Attach = func(ctx context.Context, tx pgx.Tx) error {
			b := &pgx.Batch{}
			for _, g := range spawned {
				if err := g.queue(b, id); err != nil {
					return err
				}
			}
			return tx.SendBatch(ctx, b).Close()
		}
	}
	return f
}

// decodeOutput decodes node's stored output b into v.
func decodeOutput(node string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("venturi: output of node %q: %w", node, err)
	}
	return nil
}
