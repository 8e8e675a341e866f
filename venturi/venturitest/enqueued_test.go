package venturitest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/venturitest"
)

// email is a producer-side task.
type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (email) Kind() string { return "email" }

func (e email) DedupKey() venturi.DedupKey { return venturi.DedupKey(e.Subject) }

func (email) Priority() venturi.Priority { return venturi.PriorityHigh }

func to(addr string) func(email) bool { return func(e email) bool { return e.To == addr } }

func enqueue(t *testing.T, q *venturi.Queue, task venturi.Task, opts ...venturi.EnqueueOption) venturi.Result {
	t.Helper()
	res, err := q.Enqueue(context.Background(), task, opts...)
	if err != nil {
		t.Fatalf("enqueue %+v: %v", task, err)
	}
	return res
}

func TestRequireEnqueuedMatchesThePayload(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	first := enqueue(t, q, email{To: "ada@example.com", Subject: "welcome"})
	second := enqueue(t, q, email{To: "bob@example.com", Subject: "reset"}, venturi.After(time.Hour))
	enqueue(t, q, step{Do: "complete"}) // another kind

	j := venturitest.RequireEnqueued(t, pool, to("bob@example.com"))
	if j.ID != second.ID || j.Kind != "email" || j.State != venturi.StateScheduled || j.Priority != venturi.PriorityHigh ||
		j.DedupKey != "reset" || !strings.Contains(string(j.Payload), "bob@example.com") || j.RunCount != 0 || len(j.Journal) != 0 {
		t.Fatalf("job %+v, want the scheduled email to bob", j)
	}
	if j := venturitest.RequireEnqueued[email](t, pool, nil); j.ID != first.ID {
		t.Fatalf("nil match found %s, want the oldest job %s", j.ID, first.ID)
	}
	venturitest.RequireNotEnqueued(t, pool, to("eve@example.com"))
	venturitest.RequireNotEnqueued(t, pool, func(e email) bool { return e.To == "ada@example.com" && e.Subject != "welcome" })
}

func TestRequireEnqueuedStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res := enqueue(t, q, email{To: "ada@example.com", Subject: "welcome"})
	if _, err := pool.Exec(ctx, "UPDATE venturi_job SET state = 'dead', finished_at = now() WHERE id = $1", res.ID[:]); err != nil {
		t.Fatal(err)
	}

	// A dead job is not pending.
	venturitest.RequireNotEnqueued(t, pool, to("ada@example.com"))
	if j := venturitest.RequireEnqueued(t, pool, to("ada@example.com"), venturitest.WithAnyState()); j.ID != res.ID || j.State != venturi.StateDead {
		t.Fatalf("any state: %+v", j)
	}
	if j := venturitest.RequireEnqueued(t, pool, to("ada@example.com"), venturitest.WithStates(venturi.StateCompleted, venturi.StateDead)); j.ID != res.ID {
		t.Fatalf("completed or dead: %+v", j)
	}
	venturitest.RequireNotEnqueued(t, pool, to("ada@example.com"), venturitest.WithStates(venturi.StateCompleted))
}

func TestRequireEnqueuedFailureListsTheKindsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	msgs := failures(t, func(tb testing.TB) { venturitest.RequireEnqueued[email](tb, pool, nil) })
	if len(msgs) != 1 || !strings.Contains(msgs[0], "no email job in state scheduled or available matches") ||
		!strings.Contains(msgs[0], "there is no email job in any state") {
		t.Fatalf("failure on an empty queue: %q", msgs)
	}

	enqueue(t, q, email{To: "ada@example.com", Subject: "welcome"})
	done := enqueue(t, q, email{To: "bob@example.com", Subject: "reset"})
	if _, err := pool.Exec(ctx, "UPDATE venturi_job SET state = 'completed', finished_at = now() WHERE id = $1", done.ID[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at) VALUES (gen_random_uuid(), 'email', 'available', '{"to": 5}', now())`); err != nil {
		t.Fatal(err)
	}
	msgs = failures(t, func(tb testing.TB) { venturitest.RequireEnqueued(tb, pool, to("bob@example.com")) })
	if len(msgs) != 1 {
		t.Fatalf("failures %q, want one", msgs)
	}
	t.Logf("the failure message:\n%s", msgs[0])
	for _, want := range []string{
		"no email job in state scheduled or available matches",
		"3 email job(s) in any state, oldest first:",
		`available {"to": "ada@example.com", "subject": "welcome"}`,
		done.ID.String() + ` completed {"to": "bob@example.com", "subject": "reset"} (matches)`,
		`{"to": 5} (does not decode into venturitest_test.email`,
	} {
		if !strings.Contains(msgs[0], want) {
			t.Fatalf("failure message lacks %q:\n%s", want, msgs[0])
		}
	}

	msgs = failures(t, func(tb testing.TB) { venturitest.RequireNotEnqueued(tb, pool, to("ada@example.com")) })
	if len(msgs) != 1 || !strings.Contains(msgs[0], "want no email job in state scheduled or available to match, found") {
		t.Fatalf("RequireNotEnqueued failures %q", msgs)
	}
}

func TestRequireEnqueuedTxSeesUncommittedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := q.EnqueueTx(ctx, tx, email{To: "ada@example.com", Subject: "welcome"})
	if err != nil {
		t.Fatal(err)
	}
	if j := venturitest.RequireEnqueuedTx(t, tx, to("ada@example.com")); j.ID != res.ID {
		t.Fatalf("found %s, want %s", j.ID, res.ID)
	}
	venturitest.RequireNotEnqueuedTx(t, tx, to("bob@example.com"))
	venturitest.RequireNotEnqueued(t, pool, to("ada@example.com")) // not committed
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		venturitest.RequireNotEnqueuedTx[email](t, tx, nil) // rolled back
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRequireEnqueuedWaits(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	enqueued := make(chan error, 1)
	time.AfterFunc(200*time.Millisecond, func() {
		_, err := q.Enqueue(context.Background(), email{To: "late@example.com"})
		enqueued <- err
	})
	start := time.Now()
	venturitest.RequireEnqueued(t, pool, to("late@example.com"), venturitest.WithWait(30*time.Second))
	if err := <-enqueued; err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("found after %v, before the enqueue", waited)
	}

	start = time.Now()
	msgs := failures(t, func(tb testing.TB) {
		venturitest.RequireEnqueued(tb, pool, to("never@example.com"), venturitest.WithWait(100*time.Millisecond))
	})
	if len(msgs) != 1 || !strings.Contains(msgs[0], "after waiting 100ms") || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("after %v: failures %q, want one after waiting 100ms", time.Since(start), msgs)
	}

	// RequireNotEnqueued with a wait watches for the whole duration.
	time.AfterFunc(100*time.Millisecond, func() {
		_, err := q.Enqueue(context.Background(), email{To: "spam@example.com"})
		enqueued <- err
	})
	msgs = failures(t, func(tb testing.TB) {
		venturitest.RequireNotEnqueued(tb, pool, to("spam@example.com"), venturitest.WithWait(30*time.Second))
	})
	if err := <-enqueued; err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || !strings.Contains(msgs[0], "spam@example.com") {
		t.Fatalf("failures %q, want the job that appeared", msgs)
	}
}
