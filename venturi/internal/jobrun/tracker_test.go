package jobrun

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

var (
	errLeaseLost = errors.New("test: lease lost")
	errStopped   = errors.New("test: stopped")
	errTimedOut  = errors.New("test: timed out")
)

// within bounds the waits for a cancellation the tracker schedules (after the grace
// period, here zero): it comes at once; the bound only keeps a broken tracker from
// hanging the test.
const within = 10 * time.Second

func newTestTracker(lease time.Duration) *Tracker {
	return NewTracker(TrackerConfig{
		Lease: lease, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		LeaseLost: errLeaseLost, Stopped: errStopped, TimedOut: errTimedOut,
	})
}

// claim returns a job claimed now.
func claim() *Job { return &Job{ID: ulid.Make(), Kind: "k", Sent: time.Now(), Stop: NewStop()} }

// started begins j on t and returns its run's context.
func started(t *testing.T, tr *Tracker, j *Job) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	if !tr.Begin(j, cancel) {
		t.Fatal("Begin refused a run whose lease has not run out")
	}
	return ctx
}

// cancelledWith waits for ctx to be cancelled and reports its cause.
func cancelledWith(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(within):
		t.Fatal("the run was not cancelled")
		return nil
	}
}

func TestTrackerAddHoldsRemove(t *testing.T) {
	tr := newTestTracker(time.Minute)
	j := claim()
	if tr.Holds(j) {
		t.Fatal("holds a job never added")
	}
	tr.Add([]*Job{j})
	if !tr.Holds(j) {
		t.Fatal("does not hold an added job")
	}
	// The same job claimed again under a new token: the old claim is no longer held, and
	// removing it leaves the new one tracked.
	again := &Job{ID: j.ID, Sent: time.Now()}
	tr.Add([]*Job{again})
	if tr.Holds(j) || !tr.Holds(again) {
		t.Fatalf("after a new claim: holds old %v, new %v; want only the new", tr.Holds(j), tr.Holds(again))
	}
	tr.Remove(j)
	if !tr.Holds(again) {
		t.Fatal("removing the stale claim removed the new one")
	}
	tr.Remove(again)
	if tr.Holds(again) || len(tr.Leased()) != 0 {
		t.Fatal("a removed job is still tracked")
	}
}

func TestTrackerAddCancelsAnEarlierRunOfTheJob(t *testing.T) {
	tr := newTestTracker(time.Minute)
	j := claim()
	tr.Add([]*Job{j})
	ctx := started(t, tr, j)
	tr.Add([]*Job{{ID: j.ID, Sent: time.Now()}}) // rescued and claimed again
	if cause := cancelledWith(t, ctx); cause != errLeaseLost {
		t.Fatalf("earlier run cancelled with %v, want the lease-lost cause", cause)
	}
}

func TestTrackerBegin(t *testing.T) {
	tr := newTestTracker(time.Minute)
	if tr.Begin(claim(), func(error) {}) {
		t.Error("Begin started a job that is not tracked")
	}
	stale := &Job{ID: ulid.Make(), Sent: time.Now().Add(-time.Hour)} // its lease ran out in the buffer
	tr.Add([]*Job{stale})
	if tr.Begin(stale, func(error) {}) {
		t.Error("Begin started a job whose lease ran out")
	}
	j := claim()
	tr.Add([]*Job{j})
	started(t, tr, j)
	if got := tr.Stuck(); len(got) != 1 || got[0] != j {
		t.Errorf("Stuck = %v, want the started run", got)
	}
	tr.Ended(j)
	if got := tr.Stuck(); len(got) != 0 {
		t.Errorf("Stuck = %v after the handler returned, want none", got)
	}
}

func TestTrackerWritingLeavesRunsOutOfLeased(t *testing.T) {
	tr := newTestTracker(time.Minute)
	jobs := []*Job{claim(), claim(), claim()}
	tr.Add(jobs)
	end := &End{Job: jobs[1]}
	tr.Writing([]*End{end}, true)
	got := tr.Leased()
	if len(got) != 2 || got[0] != jobs[0] || got[1] != jobs[2] {
		t.Fatalf("Leased while one result is written = %v, want the other two in ID order", got)
	}
	tr.Writing([]*End{end}, false) // the write failed: extended again until it is retried
	got = tr.Leased()
	if len(got) != 3 {
		t.Fatalf("Leased after the failed write = %d runs, want 3", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].ID.Compare(got[i].ID) >= 0 {
			t.Fatalf("Leased not in ID order: %v", got)
		}
	}
}

func TestTrackerExtended(t *testing.T) {
	tr := newTestTracker(time.Minute)
	kept, held, lost, buffered, finished := claim(), claim(), claim(), claim(), claim()
	tr.Add([]*Job{kept, held, lost, buffered, finished})
	keptCtx, heldCtx, lostCtx, finishedCtx := started(t, tr, kept), started(t, tr, held), started(t, tr, lost), started(t, tr, finished)
	tr.Ended(finished)
	tr.mu.Lock()
	heldDeadline := tr.active[held.ID].deadline
	tr.mu.Unlock()
	tr.Extended(tr.Leased(), map[ulid.ULID]bool{kept.ID: true, held.ID: false}, time.Now().Add(time.Second))
	if cause := cancelledWith(t, lostCtx); cause != errLeaseLost {
		t.Errorf("a started run that was not found: cancelled with %v, want the lease-lost cause", cause)
	}
	if keptCtx.Err() != nil || heldCtx.Err() != nil || finishedCtx.Err() != nil {
		t.Errorf("kept run cancelled %v, held run cancelled %v, finished run cancelled %v; want none",
			keptCtx.Err(), heldCtx.Err(), finishedCtx.Err())
	}
	tr.mu.Lock()
	if d := tr.active[held.ID].deadline; !d.Equal(heldDeadline) {
		t.Errorf("a run whose row another transaction held: deadline moved from %v to %v, want it kept", heldDeadline, d)
	}
	tr.mu.Unlock()
	if tr.Begin(buffered, func(error) {}) {
		t.Error("a buffered run that was not found may still start")
	}
	// An extension sent long ago leaves the kept lease ending a lease after it was sent.
	tr.Extended([]*Job{kept}, map[ulid.ULID]bool{kept.ID: true}, time.Now().Add(-time.Hour))
	tr.Enforce(0, 0)
	if cause := cancelledWith(t, keptCtx); cause != errLeaseLost {
		t.Errorf("a run whose lease expired: cancelled with %v, want the lease-lost cause", cause)
	}
}

func TestTrackerEnforce(t *testing.T) {
	tr := newTestTracker(time.Minute)
	fencing, timed, untimed, fine := claim(), claim(), claim(), claim()
	tr.Add([]*Job{fencing, timed, untimed, fine})
	fencingCtx, timedCtx, untimedCtx, fineCtx := started(t, tr, fencing), started(t, tr, timed), started(t, tr, untimed), started(t, tr, fine)
	tr.Untimed(untimed)
	tr.mu.Lock()
	tr.active[fencing.ID].deadline = time.Now().Add(time.Second) // within the margin below
	for _, j := range []*Job{timed, untimed} {
		tr.active[j.ID].started = time.Now().Add(-time.Hour) // ran longer than the timeout
	}
	tr.mu.Unlock()
	tr.Enforce(10*time.Second, time.Minute)
	if cause := cancelledWith(t, fencingCtx); cause != errLeaseLost {
		t.Errorf("a run whose lease expires within the margin: cancelled with %v, want the lease-lost cause", cause)
	}
	if cause := cancelledWith(t, timedCtx); cause != errTimedOut {
		t.Errorf("a run past the job timeout: cancelled with %v, want the timeout cause", cause)
	}
	if untimedCtx.Err() != nil || fineCtx.Err() != nil {
		t.Errorf("untimed run cancelled %v, run within its lease and timeout cancelled %v; want neither",
			untimedCtx.Err(), fineCtx.Err())
	}
}

func TestTrackerRequestStop(t *testing.T) {
	tr := newTestTracker(time.Minute)
	running, buffered := claim(), claim()
	tr.Add([]*Job{running, buffered})
	ctx := started(t, tr, running)
	tr.RequestStop(running.ID, "replaced")
	select {
	case <-running.Stop.Done():
	default:
		t.Fatal("the stop signal of a run asked to stop is open")
	}
	if ev := running.StopEvent.Load(); ev == nil || *ev != "replaced" {
		t.Fatalf("StopEvent = %v, want replaced", ev)
	}
	if cause := cancelledWith(t, ctx); cause != errStopped { // after the grace period, zero here
		t.Fatalf("cancelled with %v, want the stopped cause", cause)
	}
	tr.RequestStop(running.ID, "cancelled") // a second request changes nothing
	if ev := running.StopEvent.Load(); *ev != "replaced" {
		t.Errorf("StopEvent = %s after a second request, want the first", *ev)
	}
	// A buffered run asked to stop gets its grace period from its start.
	tr.RequestStop(buffered.ID, "cancelled")
	if cause := cancelledWith(t, started(t, tr, buffered)); cause != errStopped {
		t.Errorf("buffered run cancelled with %v once started, want the stopped cause", cause)
	}
}

func TestTrackerStopAll(t *testing.T) {
	tr := newTestTracker(time.Minute)
	jobs := []*Job{claim(), claim(), {ID: ulid.Make(), Sent: time.Now()}} // the last without a signal
	tr.Add(jobs)
	tr.StopAll()
	for _, j := range jobs[:2] {
		select {
		case <-j.Stop.Done():
		default:
			t.Errorf("job %s: stop signal open after StopAll", j.ID)
		}
	}
	if jobs[0].StopEvent.Load() != nil {
		t.Error("StopAll set a stop event: shutting down is not a request to stop")
	}
}

func TestStopClosesOnce(t *testing.T) {
	s := NewStop()
	s.Close()
	s.Close()
	select {
	case <-s.Done():
	default:
		t.Fatal("Done is open after Close")
	}
}
