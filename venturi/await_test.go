package venturi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// TestAwaitFromAnotherQueue: a Queue on another pool awaits a job that a worker runs; it
// returns the ended job with its journal, for runs that end while it waits and for jobs
// that ended before the call.
func TestAwaitFromAnotherQueue(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	startFlowWorkers[cancellable](t, pool, st, 1, fastConfig())
	other := venturi.NewQueue(newPoolLike(t, pool), venturi.QueueConfig{})
	r := enqueue(t, q, cancellable{N: 1, Hold: true})
	waitState(t, q, r, venturi.StateRunning)
	got := make(chan *venturi.Job, 1)
	go func() {
		j, err := other.Await(ctx, r.ID)
		if err != nil {
			t.Errorf("Await: %v", err)
		}
		got <- j
	}()
	close(st.hold)
	if j := recv(t, got, "Await to return"); j == nil || j.State != venturi.StateCompleted || lastEntry(j).Event != venturi.EventCompleted {
		t.Fatalf("Await returned %+v", j)
	}
	if j, err := other.Await(ctx, r.ID); err != nil || j.State != venturi.StateCompleted {
		t.Fatalf("Await of an ended job: %v, %v", j, err)
	}
	if _, err := other.Await(ctx, ulid.Make()); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("Await of an unknown job: %v", err)
	}
	_, j, err := other.EnqueueAndAwait(ctx, cancellable{N: 2})
	if err != nil || j.State != venturi.StateCompleted {
		t.Fatalf("EnqueueAndAwait: %v, %v", j, err)
	}
}

// TestAwaitSeesCancelAndPolls: a waiter on a Queue without notifications learns of a
// cancel by its poll; a waiter's context ending returns its error.
func TestAwaitSeesCancelAndPolls(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	quiet := venturi.NewQueue(pool, venturi.QueueConfig{NoNotify: true})
	r := enqueue(t, q, cancellable{N: 1}, venturi.After(time.Hour))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := quiet.Await(short, r.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Await past its deadline: %v", err)
	}
	got := make(chan *venturi.Job, 1)
	go func() {
		j, _ := quiet.Await(ctx, r.ID)
		got <- j
	}()
	if _, err := q.Cancel(ctx, r.ID, "not needed"); err != nil {
		t.Fatal(err)
	}
	if j := recv(t, got, "Await to see the cancel"); j == nil || j.State != venturi.StateCancelled {
		t.Fatalf("Await returned %+v", j)
	}
}

// newPoolLike opens another pool on pool's database and schema, closed with the test.
func newPoolLike(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.NewWithConfig(context.Background(), pool.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
