package venturi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/testhook"
)

// The venturi side of internal/testhook, for venturi/venturitest: build a *Run[C] outside a
// worker and read back what a handler left in it. Nothing here widens the exported API.
func init() {
	testhook.FillRun = func(run any, spec testhook.RunSpec) error {
		r, ok := run.(testRun)
		if !ok {
			return fmt.Errorf("venturi: testhook.FillRun: %T is not a *venturi.Run", run)
		}
		return r.fillTest(spec)
	}
	testhook.ReadRun = func(run any) testhook.RunState {
		if r, ok := run.(testRun); ok {
			return r.readTest()
		}
		return testhook.RunState{}
	}
	testhook.JobOfKind = func(row *dbsqlc.JobsOfKindRow) (any, error) {
		return jobFromRow((*dbsqlc.GetJobRow)(row))
	}
}

// testRun is implemented by every *Run[C], whatever C is, so that the hooks can reach a
// run through a type assertion.
type testRun interface {
	fillTest(spec testhook.RunSpec) error
	readTest() testhook.RunState
}

func (r *Run[C]) fillTest(spec testhook.RunSpec) error {
	var history []JournalEntry
	if spec.History != nil {
		h, ok := spec.History.([]JournalEntry)
		if !ok {
			return fmt.Errorf("venturi: test run history is %T, want []venturi.JournalEntry", spec.History)
		}
		history = numbered(h)
	}
	var carry C
	if spec.Carry != nil {
		c, ok := spec.Carry.(C)
		if !ok {
			return fmt.Errorf("venturi: test run carry is %T, want %T", spec.Carry, carry)
		}
		carry = c
	}
	var signals []Signal
	if spec.Signals != nil {
		s, ok := spec.Signals.([]Signal)
		if !ok {
			return fmt.Errorf("venturi: test run signals are %T, want []venturi.Signal", spec.Signals)
		}
		signals = s
	}
	finish := spec.Finish
	*r = Run[C]{
		id: ulid.ULID(spec.ID), kind: spec.Kind, token: spec.Token, runs: spec.RunCount,
		failures: spec.Failures, history: history[max(len(history)-JournalRecent, 0):], carry: carry, shutdown: spec.Shutdown,
		earlier: func(_ context.Context, _ ulid.ULID, before int64, limit int) ([]JournalEntry, error) {
			return pageOf(history, before, limit), nil
		},
		// As in a worker, a run reads every unconsumed signal (with one of names) on each
		// call: what it read is consumed only when it ends.
		signals: func(_ context.Context, _ ulid.ULID, names []string) ([]Signal, error) {
			var out []Signal
			for _, s := range signals {
				if len(out) < MaxSignalsRead && (len(names) == 0 || slices.Contains(names, s.Name)) {
					out = append(out, s)
				}
			}
			return out, nil
		},
		// Run.Checkpoint succeeds without a database; the run's final carry is what it reports.
		saveCarry: func(context.Context, ulid.ULID, int64, []byte) (int64, error) { return 1, nil },
		finish: func(ctx context.Context, _ pgx.Tx, o Outcome, c *C, attachment json.RawMessage) error {
			if finish == nil {
				return nil
			}
			return finish(ctx, o, c, attachment)
		},
		flows: &testFlows{spec: spec},
	}
	return nil
}

func (r *Run[C]) readTest() testhook.RunState {
	st := testhook.RunState{Carry: r.carry, Attachment: r.attachment, Finalized: r.finalized, Consumed: slices.Clone(r.consumed),
		Output: r.flow.output}
	for _, g := range r.flow.spawned {
		for _, n := range g.nodes {
			st.Spawned = append(st.Spawned, n.Node)
		}
	}
	return st
}

// testFlows is a test run's flowAccess: its workflow, node, the outputs and batch counts
// the test gave it.
type testFlows struct {
	spec testhook.RunSpec
}

func (f *testFlows) node(context.Context, ulid.ULID) (*dbsqlc.NodeOfJobRow, error) {
	if f.spec.Workflow == ([16]byte{}) {
		return nil, pgx.ErrNoRows
	}
	return &dbsqlc.NodeOfJobRow{WorkflowID: pgtype.UUID{Bytes: f.spec.Workflow, Valid: true}, Node: f.spec.Node}, nil
}

func (f *testFlows) output(_ context.Context, _ pgtype.UUID, node string) ([]byte, error) {
	b, ok := f.spec.Outputs[node]
	if !ok {
		return nil, pgx.ErrNoRows
	}
	return b, nil
}

func (f *testFlows) upstream(context.Context, ulid.ULID) (map[string]json.RawMessage, error) {
	return maps.Clone(f.spec.Outputs), nil
}

func (f *testFlows) batch(context.Context, ulid.ULID) (*BatchInfo, error) {
	b, ok := f.spec.Batch.(*BatchInfo)
	if !ok || b == nil {
		return nil, ErrNotBatch
	}
	c := *b
	return &c, nil
}

// numbered returns a test run's history (its whole journal) with each entry's Seq set to
// its position, unless the caller numbered them.
func numbered(h []JournalEntry) []JournalEntry {
	if len(h) == 0 || h[0].Seq != 0 {
		return h
	}
	out := slices.Clone(h)
	for i := range out {
		out[i].Seq = int64(i) + 1
	}
	return out
}

// pageOf is Queue.Journal over an in-memory journal, oldest first.
func pageOf(h []JournalEntry, before int64, limit int) []JournalEntry {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxJournalPage)
	end := len(h)
	if before > 0 {
		end = sort.Search(len(h), func(i int) bool { return h[i].Seq >= before })
	}
	return slices.Clone(h[max(end-limit, 0):end])
}
