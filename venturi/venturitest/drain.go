package venturitest

import (
	"context"
	"fmt"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testhook"
)

// MaxDrainRuns bounds the runs of one [Drain]: a job that always pauses for zero, or
// always fails with a zero backoff, would otherwise keep it busy forever.
const MaxDrainRuns = 1000

// Drained is one run that [Drain] performed.
type Drained struct {
	// ID is the job's ID.
	ID ulid.ULID
	// Kind is the job's kind.
	Kind string
	// State is the job's state after the run: completed, available, scheduled or dead.
	State venturi.State
	// Entry is the journal entry the run wrote: its event, note, attachment and delay.
	Entry venturi.JournalEntry
}

// Drain works every available job of kinds (every kind registered on w when none is
// given) in the caller's goroutine, one at a time, until none is available, and returns
// the runs in order. A job that pauses or retries with no delay becomes available again
// and runs again in the same Drain; a scheduled job waits for its due time, which Drain
// does not advance.
//
// w is a worker that has not been started, with its task types registered; Drain takes
// the place of Start in a test that wants a deterministic end. It fails the test when a
// run cannot be performed, or after [MaxDrainRuns] runs.
func Drain[S any](ctx context.Context, tb testing.TB, w *venturi.Worker[S], kinds ...string) []Drained {
	tb.Helper()
	if testhook.Drain == nil {
		tb.Fatal("venturitest.Drain: this build of venturi does not implement draining (internal/testhook.Drain is nil); " +
			"it needs the venturi side of Drain, set in package venturi's init")
		return nil
	}
	runs, err := testhook.Drain(ctx, w, kinds, MaxDrainRuns+1)
	if err != nil {
		tb.Fatalf("venturitest.Drain: %v", err)
	}
	if len(runs) > MaxDrainRuns {
		tb.Fatalf("venturitest.Drain: still draining after %d runs: does a job pause or retry with no delay forever? last run: %s %s %v",
			MaxDrainRuns, runs[len(runs)-1].Kind, ulid.ULID(runs[len(runs)-1].ID), runs[len(runs)-1].Entry)
	}
	out := make([]Drained, len(runs))
	for i, r := range runs {
		entry, ok := r.Entry.(venturi.JournalEntry)
		if !ok && r.Entry != nil {
			tb.Fatalf("venturitest.Drain: run %d's entry is %T, want venturi.JournalEntry", i, r.Entry)
		}
		out[i] = Drained{ID: ulid.ULID(r.ID), Kind: r.Kind, State: venturi.State(r.State), Entry: entry}
	}
	return out
}

// String describes the run: "fetch_bookmark 01J… completed: note".
func (d Drained) String() string {
	s := fmt.Sprintf("%s %s %s", d.Kind, d.ID, d.State)
	if d.Entry.Note != "" {
		s += ": " + d.Entry.Note
	}
	return s
}
