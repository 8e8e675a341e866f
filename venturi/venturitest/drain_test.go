package venturitest_test

// Drain's tests, and what Drain says when venturi's side of testhook.Drain is missing
// (TestDrainWithoutTheHookFails).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testhook"
	"github.com/venturi-dev/venturi/venturitest"
)

// chainApp is the drain tests' worker state.
type chainApp struct{ queue *venturi.Queue }

// hop enqueues the next hop until N reaches zero.
type hop struct {
	N int `json:"n"`
}

func (hop) Kind() string { return "hop" }

func (h hop) Handle(ctx context.Context, _ *venturi.Run[struct{}], app *chainApp) (venturi.Outcome, error) {
	if h.N > 0 {
		if _, err := app.queue.Enqueue(ctx, hop{N: h.N - 1}); err != nil {
			return venturi.Outcome{}, err
		}
	}
	return venturi.CompletedWith(fmt.Sprintf("hop %d", h.N)), nil
}

// pages pauses for zero after each of its first pages and completes after the third.
type pages struct{}

type pagesCarry struct {
	Done int `json:"done"`
}

func (pages) Kind() string { return "pages" }

func (pages) Handle(_ context.Context, run *venturi.Run[pagesCarry], _ *chainApp) (venturi.Outcome, error) {
	run.CarryMut().Done++
	if run.Carry().Done < 3 {
		return venturi.PauseInWith(0, fmt.Sprintf("page %d", run.Carry().Done)), nil
	}
	return venturi.CompletedWith("3 pages"), nil
}

// broken fails: permanently, or asking for a retry in an hour.
type broken struct {
	Permanent bool `json:"permanent"`
}

func (broken) Kind() string { return "broken" }

func (b broken) Handle(context.Context, *venturi.Run[struct{}], *chainApp) (venturi.Outcome, error) {
	if b.Permanent {
		return venturi.Outcome{}, venturi.Permanentf("cannot ever work")
	}
	return venturi.Outcome{}, venturi.RetryIn(time.Hour, errors.New("try later"))
}

func drainWorker(t *testing.T, pool *pgxpool.Pool) *venturi.Worker[*chainApp] {
	t.Helper()
	w, err := venturi.NewWorker(pool, &chainApp{queue: venturi.NewQueue(pool, venturi.QueueConfig{})}, venturi.Config{})
	if err != nil {
		t.Fatal(err)
	}
	venturi.MustRegister[hop](w)
	venturi.MustRegister[pages](w)
	venturi.MustRegister[broken](w)
	return w
}

func TestDrainRunsChainsToTheEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	w := drainWorker(t, pool)
	first := enqueue(t, q, hop{N: 2})
	later := enqueue(t, q, hop{N: 9}, venturi.After(time.Hour))

	runs := venturitest.Drain(ctx, t, w)
	var got []string
	for _, r := range runs {
		if r.Kind != "hop" || r.State != venturi.StateCompleted || r.Entry.Event != venturi.EventCompleted {
			t.Fatalf("run %v, want a completed hop", r)
		}
		got = append(got, r.Entry.Note)
	}
	if strings.Join(got, ",") != "hop 2,hop 1,hop 0" || runs[0].ID != first.ID {
		t.Fatalf("runs %v, want hops 2, 1, 0 starting with %s", runs, first.ID)
	}
	// The scheduled hop is not due: Drain leaves it.
	if j := venturitest.RequireEnqueued(t, pool, func(h hop) bool { return h.N == 9 }); j.ID != later.ID || j.RunCount != 0 {
		t.Fatalf("scheduled hop %+v", j)
	}
	if runs := venturitest.Drain(ctx, t, w); len(runs) != 0 {
		t.Fatalf("a second Drain ran %v", runs)
	}
}

func TestDrainReportsEveryOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	w := drainWorker(t, pool)
	p := enqueue(t, q, pages{})
	dead := enqueue(t, q, broken{Permanent: true})
	retry := enqueue(t, q, broken{})
	h := enqueue(t, q, hop{})

	// Only the kinds asked for run.
	runs := venturitest.Drain(ctx, t, w, "pages")
	if len(runs) != 3 {
		t.Fatalf("runs %v, want the pages job three times", runs)
	}
	for i, want := range []struct {
		state venturi.State
		event venturi.Event
		note  string
	}{
		{venturi.StateAvailable, venturi.EventPaused, "page 1"},
		{venturi.StateAvailable, venturi.EventPaused, "page 2"},
		{venturi.StateCompleted, venturi.EventCompleted, "3 pages"},
	} {
		r := runs[i]
		if r.ID != p.ID || r.State != want.state || r.Entry.Event != want.event || r.Entry.Note != want.note {
			t.Fatalf("run %d: %v %s, want %s %s %q", i, r, r.Entry.Event, want.state, want.event, want.note)
		}
	}

	runs = venturitest.Drain(ctx, t, w, "broken")
	byID := map[string]venturitest.Drained{}
	for _, r := range runs {
		byID[r.ID.String()] = r
	}
	if len(runs) != 2 {
		t.Fatalf("runs %v, want each broken job once", runs)
	}
	if r := byID[dead.ID.String()]; r.State != venturi.StateDead || r.Entry.Event != venturi.EventDead || r.Entry.Note != "cannot ever work" {
		t.Fatalf("permanent failure: %v", r)
	}
	if r := byID[retry.ID.String()]; r.State != venturi.StateScheduled || r.Entry.Event != venturi.EventFailed || r.Entry.ResumeIn != time.Hour {
		t.Fatalf("retryable failure: %v resume in %v, want scheduled in an hour", r, r.Entry.ResumeIn)
	}
	// The hop was never asked for.
	if j := venturitest.RequireEnqueued[hop](t, pool, nil); j.ID != h.ID || j.RunCount != 0 {
		t.Fatalf("hop %+v", j)
	}
}

// TestDrainWithoutTheHookFails is not parallel: it replaces the hook for its duration.
func TestDrainWithoutTheHookFails(t *testing.T) {
	saved := testhook.Drain
	testhook.Drain = nil
	defer func() { testhook.Drain = saved }()
	msgs := failures(t, func(tb testing.TB) {
		venturitest.Drain(context.Background(), tb, &venturi.Worker[*chainApp]{})
	})
	if len(msgs) != 1 || !strings.Contains(msgs[0], "does not implement draining") {
		t.Fatalf("failures %q", msgs)
	}
}
