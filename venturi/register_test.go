package venturi_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/venturi-dev/venturi"
)

// Registration: the task types a worker refuses, and when it refuses them.

// mismatchTask's Merge sees an int carry but its handler keeps a string.
type mismatchTask struct{}

func (mismatchTask) Kind() string { return "mismatch" }
func (mismatchTask) Merge(existing venturi.Pending[mismatchTask, int]) venturi.Merge[mismatchTask, int] {
	return existing.Keep()
}
func (mismatchTask) Handle(ctx context.Context, run *venturi.Run[string], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// badMergeTask has a Merge method of the wrong shape.
type badMergeTask struct{}

func (badMergeTask) Kind() string                  { return "bad-merge" }
func (badMergeTask) Merge(other badMergeTask) bool { return true }
func (badMergeTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

type emptyKindHandler struct{}

func (emptyKindHandler) Kind() string { return "" }
func (emptyKindHandler) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

type otherNoteTask struct{}

func (otherNoteTask) Kind() string { return "note" } // the same kind as noteTask
func (otherNoteTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

func TestRegisterRejectsInvalidTaskTypes(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	w := newWorker(t, pool, struct{}{}, fastConfig())
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("Start with no registered task types succeeded")
	}
	if err := venturi.Register[mismatchTask](w); err == nil || !strings.Contains(err.Error(), "carry") {
		t.Errorf("merge carry int vs handler carry string: %v", err)
	}
	if err := venturi.Register[badMergeTask](w); err == nil || !strings.Contains(err.Error(), "Merge") {
		t.Errorf("malformed Merge method: %v", err)
	}
	if err := venturi.Register[emptyKindHandler](w); !errors.Is(err, venturi.ErrEmptyKind) {
		t.Errorf("empty kind: %v", err)
	}
	if err := venturi.Register[noteTask](w); err != nil {
		t.Fatal(err)
	}
	if err := venturi.Register[otherNoteTask](w); err == nil {
		t.Error("a kind registered twice was accepted")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Register of a duplicate kind did not panic")
			}
		}()
		venturi.MustRegister[otherNoteTask](w)
	}()
	startWorker(t, w)
	if err := w.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	if err := venturi.Register[panicTask](w); err == nil {
		t.Error("Register after Start succeeded")
	}
	// A malformed merge is refused at enqueue too, and writes nothing.
	enqueue(t, q, keyedBadMergeTask{}) // no collision yet: the merge method is not needed
	if _, err := q.Enqueue(context.Background(), keyedBadMergeTask{}); err == nil || !strings.Contains(err.Error(), "Merge") {
		t.Fatalf("collision with a malformed Merge: %v", err)
	}
	if n := countJobs(t, pool, "kind = 'keyed-bad-merge'"); n != 1 {
		t.Fatalf("%d rows", n)
	}
}

type keyedBadMergeTask struct{}

func (keyedBadMergeTask) Kind() string               { return "keyed-bad-merge" }
func (keyedBadMergeTask) DedupKey() venturi.DedupKey { return "x" }
func (keyedBadMergeTask) Merge() string              { return "keep" }
