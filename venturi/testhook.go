package venturi

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

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
	testhook.RetryDelay = retryDelay
	testhook.EncodeJSON = encodeJSON
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
		history = h
	}
	var carry C
	if spec.Carry != nil {
		c, ok := spec.Carry.(C)
		if !ok {
			return fmt.Errorf("venturi: test run carry is %T, want %T", spec.Carry, carry)
		}
		carry = c
	}
	finish := spec.Finish
	*r = Run[C]{
		id: ulid.ULID(spec.ID), kind: spec.Kind, token: spec.Token, runs: spec.RunCount,
		failures: spec.Failures, history: history, carry: carry, shutdown: spec.Shutdown,
		finish: func(ctx context.Context, _ pgx.Tx, o Outcome, c *C, attachment json.RawMessage) error {
			if finish == nil {
				return nil
			}
			return finish(ctx, o, c, attachment)
		},
	}
	return nil
}

func (r *Run[C]) readTest() testhook.RunState {
	return testhook.RunState{Carry: r.carry, Attachment: r.attachment, Finalized: r.finalized}
}
