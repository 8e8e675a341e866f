package venturi_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestCancelRaceResultsAgreeWithTheJournal: cancels racing runs that complete. Whatever
// each Cancel returned, the job ends once, completed or cancelled, with exactly one
// terminal entry, and the result agrees with the end: CancelEnded a job that never ran,
// CancelRequested a run that then ended cancelled or completed first (the request stays
// visible on the job), ErrJobFinished a completed job.
func TestCancelRaceResultsAgreeWithTheJournal(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	startFlowWorkers[cancellable](t, pool, flowState{g: newGauge()}, 2, fastConfig())
	var ids []ulid.ULID
	for i := range 60 {
		ids = append(ids, enqueue(t, q, cancellable{N: i}).ID)
	}
	var mu sync.Mutex
	results := map[ulid.ULID]string{}
	concurrently(len(ids), func(i int) {
		res, err := q.Cancel(ctx, ids[i], "race")
		s := res.String()
		switch {
		case errors.Is(err, venturi.ErrJobFinished):
			s = "finished"
		case err != nil:
			t.Errorf("Cancel: %v", err)
		}
		mu.Lock()
		results[ids[i]] = s
		mu.Unlock()
	})
	seen := map[string]int{}
	for _, id := range ids {
		j := waitJob(t, q, id, "to end", func(j *venturi.Job) bool {
			return j.State == venturi.StateCompleted || j.State == venturi.StateCancelled
		})
		terminal := 0
		for _, e := range j.Journal {
			if e.Event == venturi.EventCompleted || e.Event == venturi.EventCancelled {
				terminal++
			}
		}
		last := lastEntry(j)
		res := results[id]
		seen[res+"/"+string(j.State)]++
		ok := terminal == 1
		switch res {
		case "ended":
			ok = ok && j.State == venturi.StateCancelled && j.RunCount == 0 && eventsOf(j) == "cancelled" && last.Note == "race"
		case "requested":
			ok = ok && j.StopRequested && j.StopEvent == venturi.EventCancelled && j.RunCount == 1 &&
				(j.State == venturi.StateCompleted && last.Event == venturi.EventCompleted ||
					j.State == venturi.StateCancelled && last.Event == venturi.EventCancelled && strings.HasPrefix(last.Note, "race"))
		case "finished":
			ok = ok && j.State == venturi.StateCompleted && last.Event == venturi.EventCompleted && !j.StopRequested
		default:
			ok = false
		}
		if !ok {
			t.Fatalf("job %s: Cancel said %s; the job is %s after %d runs, journal %s (%q), stop %v %s",
				id, res, j.State, j.RunCount, eventsOf(j), last.Note, j.StopRequested, j.StopEvent)
		}
	}
	t.Logf("Cancel result / end: %v", seen)
}

// TestHookTokenReplayedConcurrently: the same single-use token presented by many callers
// at once resumes its job exactly once; every other caller gets ErrHookInvalid.
func TestHookTokenReplayedConcurrently(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	st := hookState{tokens: make(chan string, 1)}
	startWorkerFor[confirmable](t, pool, st, fastConfig())
	r := enqueue(t, q, confirmable{})
	token := recv(t, st.tokens, "the hook's token")
	waitState(t, q, r, venturi.StateWaiting)
	var mu sync.Mutex
	resumed, refused := 0, 0
	concurrently(16, func(int) {
		_, _, err := q.ResumeHook(ctx, token, "someone")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			resumed++
		case errors.Is(err, venturi.ErrHookInvalid):
			refused++
		default:
			t.Errorf("ResumeHook: %v", err)
		}
	})
	if resumed != 1 || refused != 15 {
		t.Fatalf("%d resumed, %d refused; want 1 and 15", resumed, refused)
	}
	waitState(t, q, r, venturi.StateCompleted)
	if n := countSignals(t, pool, "true"); n != 1 {
		t.Fatalf("%d signals stored, want 1", n)
	}
}
