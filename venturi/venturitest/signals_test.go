package venturitest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturitest"
)

// confirmImport waits for "confirm" (or "reject") on its first run; the run after the wait
// completes with who confirmed, cancels on a rejection, and cancels when the wait timed out.
type confirmImport struct {
	Size int `json:"size"`
}

type confirmation struct {
	By string `json:"by"`
}

func (confirmImport) Kind() string { return "confirm_import" }

func (c confirmImport) Handle(ctx context.Context, run *venturi.Run[int], _ struct{}) (venturi.Outcome, error) {
	names, waited := run.Waited()
	if !waited {
		*run.CarryMut() = c.Size
		return venturi.WaitForSignal(time.Hour, "confirm", "reject"), nil
	}
	sigs, err := run.Signals(ctx, names...)
	if err != nil {
		return venturi.Outcome{}, err
	}
	if len(sigs) == 0 {
		return venturi.Cancelled("nobody confirmed"), nil
	}
	if sigs[0].Name == "reject" {
		return venturi.Cancelled("rejected"), nil
	}
	who, err := venturi.DecodeSignal[confirmation](sigs[0])
	if err != nil {
		return venturi.Outcome{}, venturi.Permanent(err)
	}
	return venturi.CompletedWith(fmt.Sprintf("%d rows confirmed by %s (seq %d)", run.Carry(), who.By, sigs[0].Seq)), nil
}

// TestRunHandlerResumesAfterAWait: RunOptions.Waited and Signals drive a handler's resume
// path without a database: the signals it reads, the timeout, and which it consumed.
func TestRunHandlerResumesAfterAWait(t *testing.T) {
	ctx := context.Background()
	first := venturitest.RunHandler(ctx, confirmImport{Size: 7}, struct{}{}, venturitest.RunOptions[int]{})
	if !first.Outcome.IsWait() || first.Carry != 7 || len(first.Consumed) != 0 {
		t.Fatalf("first run: %+v", first)
	}

	signals := []venturi.Signal{
		venturitest.SignalOf("noise", "x", "n-1"),
		venturitest.SignalOf("confirm", confirmation{By: "ann"}, "mail-1"),
	}
	res := venturitest.RunHandler(ctx, confirmImport{Size: 7}, struct{}{},
		venturitest.RunOptions[int]{Carry: first.Carry, Waited: []string{"confirm", "reject"}, Signals: signals})
	if res.Err != nil || res.Event() != venturi.EventCompleted || res.Note() != "7 rows confirmed by ann (seq 2)" {
		t.Fatalf("resumed run: %s %q %v", res.Event(), res.Note(), res.Err)
	}
	if len(res.Consumed) != 1 || res.Consumed[0].DeliveryID != "mail-1" || res.Consumed[0].SentAt.IsZero() {
		t.Fatalf("consumed %+v, want the confirmation only (the names asked for)", res.Consumed)
	}

	timedOut := venturitest.RunHandler(ctx, confirmImport{Size: 7}, struct{}{},
		venturitest.RunOptions[int]{Carry: 7, Waited: []string{"confirm", "reject"}})
	if !timedOut.Outcome.IsCancel() || timedOut.Note() != "nobody confirmed" {
		t.Fatalf("timed out: %s %q", timedOut.Event(), timedOut.Note())
	}

	rejected := venturitest.RunHandler(ctx, confirmImport{Size: 7}, struct{}{},
		venturitest.RunOptions[int]{Waited: []string{"confirm", "reject"}, Signals: []venturi.Signal{{Name: "reject", Seq: 41}}})
	if rejected.Note() != "rejected" || len(rejected.Consumed) != 1 || rejected.Consumed[0].Seq != 41 {
		t.Fatalf("rejected: %q, consumed %+v", rejected.Note(), rejected.Consumed)
	}
}

// TestWaitedSkipsMergesAndAbandonedRuns: Run.Waited reads the newest run's end, past merged
// entries and abandoned runs; any other end after the wait means no wait.
func TestWaitedSkipsMergesAndAbandonedRuns(t *testing.T) {
	ctx := context.Background()
	wait := venturi.JournalEntry{Event: venturi.EventWaiting, Run: 1, Wait: []string{"confirm"}}
	for _, c := range []struct {
		name    string
		history []venturi.JournalEntry
		waited  bool
	}{
		{"fresh job", nil, false},
		{"right after the wait", []venturi.JournalEntry{wait}, true},
		{"an enqueue merged into the woken job", []venturi.JournalEntry{wait, {Event: venturi.EventMerged}}, true},
		{"the woken run's worker died", []venturi.JournalEntry{wait, {Event: venturi.EventAbandoned, Run: 2}, {Event: venturi.EventMerged}}, true},
		{"the woken run failed", []venturi.JournalEntry{wait, {Event: venturi.EventFailed, Run: 2}}, false},
		{"the woken run was interrupted", []venturi.JournalEntry{wait, {Event: venturi.EventInterrupted, Run: 2}}, false},
		{"a wait before a pause", []venturi.JournalEntry{wait, {Event: venturi.EventPaused, Run: 2}}, false},
	} {
		res := venturitest.RunFunc(ctx, func(_ context.Context, _ confirmImport, run *venturi.Run[int], _ struct{}) (venturi.Outcome, error) {
			names, ok := run.Waited()
			if ok != c.waited || ok && (len(names) != 1 || names[0] != "confirm") {
				return venturi.Outcome{}, fmt.Errorf("Waited = %v, %v; want %v", names, ok, c.waited)
			}
			return venturi.Completed(), nil
		}, confirmImport{}, struct{}{}, venturitest.RunOptions[int]{History: c.history, RunCount: len(c.history) + 1})
		if res.Err != nil {
			t.Errorf("%s: %v", c.name, res.Err)
		}
	}
}
