// Package testhook connects package venturi to venturi/venturitest for what Go lets no
// other package do without widening venturi's exported API: build a *venturi.Run[C]
// outside a worker and read back what a handler left in it, drain a worker's jobs in the
// caller's goroutine, and convert a job's row into a *venturi.Job. venturi sets these
// functions in an init function (testhook.go) and venturitest calls them. Values whose
// types live in package venturi cross as any, because this package cannot import venturi
// (venturi imports it). venturitest/doc.go says why this bridge and not an exported
// constructor or a copy of the run loop.
package testhook

import (
	"context"
	"encoding/json"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// RunSpec describes a run built outside a worker. Carry is a C for a *venturi.Run[C]
// (nil keeps the zero value) and History a []venturi.JournalEntry.
type RunSpec struct {
	ID       [16]byte
	Kind     string
	Token    int64
	RunCount int
	Failures int
	History  any
	Carry    any
	Shutdown <-chan struct{}
	// Signals is a []venturi.Signal: the job's unconsumed signals, which Run.Signals
	// returns (nil: none).
	Signals any
	// Finish receives Run.CompleteTx's outcome (a venturi.Outcome), carry (a *C) and
	// attachment; nil makes CompleteTx succeed without writing anything.
	Finish func(ctx context.Context, outcome any, carry any, attachment json.RawMessage) error
	// Workflow and Node place the job in a workflow (a zero Workflow: outside workflows);
	// Outputs are the outputs of its other nodes, by name (Run.Output reads any of them,
	// Run.UpstreamOutputs returns them all), and Batch a *venturi.BatchInfo (Run.Batch).
	Workflow [16]byte
	Node     string
	Outputs  map[string]json.RawMessage
	Batch    any
}

// RunState is what a handler left in its run.
type RunState struct {
	Carry      any // a C
	Attachment json.RawMessage
	Finalized  bool            // CompleteTx succeeded
	Consumed   []int64         // the Seq of every signal Run.Signals returned: consumed when the run ends
	Output     json.RawMessage // Run.SetOutput's
	Spawned    []string        // the names of the nodes Run.Spawn attached, in order
}

// Drained is one run that Drain performed.
type Drained struct {
	ID    [16]byte
	Kind  string
	State string // the job's state after the run: completed, available, scheduled or dead
	Entry any    // the run's venturi.JournalEntry
}

var (
	// FillRun fills run, a *venturi.Run[C] allocated by the caller, from spec.
	FillRun func(run any, spec RunSpec) error
	// ReadRun reports what the handler left in run, a *venturi.Run[C].
	ReadRun func(run any) RunState
	// Drain claims and runs, in the caller's goroutine and one at a time, every available
	// job of kinds (all the worker's kinds when empty) on worker, a *venturi.Worker[S]
	// that has not been started, until none is available; it returns the runs in order.
	// maxRuns bounds the runs (a job that always pauses for zero would loop forever).
	Drain func(ctx context.Context, worker any, kinds []string, maxRuns int) ([]Drained, error)
)

// JobOfKind converts a JobsOfKind row into a *venturi.Job, as Queue.Job converts its own.
var JobOfKind func(row *dbsqlc.JobsOfKindRow) (any, error)
