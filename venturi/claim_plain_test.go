package venturi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// Which jobs a worker claims, and in what order: only the kinds it registered, by
// priority and then by due time.

// ---- unknown kinds and disjoint registries -------------------------------------------

type orphanTask struct{}

func (orphanTask) Kind() string               { return "nobody-handles-this" }
func (orphanTask) Priority() venturi.Priority { return venturi.PriorityMax }

func TestUnknownKindIsNeverClaimed(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	orphan := enqueue(t, q, orphanTask{})
	startWorkerFor[noteTask](t, pool, struct{}{}, fastConfig())
	completeNotes(t, q, 10)
	j := jobByID(t, q, orphan.ID)
	if j.State != venturi.StateAvailable || j.RunCount != 0 || len(j.Journal) != 0 || j.AttemptedAt != nil {
		t.Fatalf("job of an unregistered kind was touched: %+v", j)
	}
}

type kindATask struct{ N int }

func (kindATask) Kind() string { return "kind-a" }
func (kindATask) Handle(ctx context.Context, run *venturi.Run[struct{}], who string) (venturi.Outcome, error) {
	return venturi.CompletedWith(who), nil
}

type kindBTask struct{ N int }

func (kindBTask) Kind() string { return "kind-b" }
func (kindBTask) Handle(ctx context.Context, run *venturi.Run[struct{}], who string) (venturi.Outcome, error) {
	return venturi.CompletedWith(who), nil
}

func TestDisjointWorkersClaimOnlyTheirKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	wa := newWorker(t, pool, "a", fastConfig())
	venturi.MustRegister[kindATask](wa)
	wb := newWorker(t, pool, "b", fastConfig())
	venturi.MustRegister[kindBTask](wb)
	if wa.ID() == wb.ID() || wa.ID() == "" {
		t.Fatalf("worker IDs %q and %q", wa.ID(), wb.ID())
	}
	startWorker(t, wa)
	startWorker(t, wb)
	var tasks []venturi.Task
	for i := 0; i < 15; i++ {
		tasks = append(tasks, kindATask{N: i}, kindBTask{N: i})
	}
	res, err := q.EnqueueMany(ctx, tasks)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		j := waitState(t, q, r, venturi.StateCompleted)
		wantWorker, wantNote := wa.ID(), "a"
		if tasks[i].Kind() == "kind-b" {
			wantWorker, wantNote = wb.ID(), "b"
		}
		if len(j.Journal) != 1 || j.Journal[0].Worker != wantWorker || j.Journal[0].Note != wantNote {
			t.Fatalf("%s job ran on %q with note %q, want worker %q", j.Kind, j.Journal[0].Worker, j.Journal[0].Note, wantWorker)
		}
	}
}

// ---- priority ---------------------------------------------------------------------------

type prioTask struct {
	Name string
	P    venturi.Priority
}

func (prioTask) Kind() string                 { return "prio" }
func (p prioTask) Priority() venturi.Priority { return p.P }
func (p prioTask) Handle(ctx context.Context, run *venturi.Run[struct{}], order chan<- string) (venturi.Outcome, error) {
	order <- p.Name
	return venturi.Completed(), nil
}

func TestClaimOrderFollowsPriorityThenDueTime(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	base := time.Now().Add(-time.Hour)
	for i, p := range []prioTask{
		{"normal-late", venturi.PriorityNormal}, {"low", venturi.PriorityLow}, {"critical", venturi.PriorityCritical},
		{"clamped", 30000}, {"high", venturi.PriorityHigh}, {"min", -30000},
	} {
		enqueue(t, q, p, venturi.At(base.Add(time.Duration(10-i)*time.Minute)))
	}
	enqueue(t, q, prioTask{"normal-early", venturi.PriorityNormal}, venturi.At(base))
	if n := countJobs(t, pool, "priority = $1", int16(venturi.PriorityMax)); n != 1 {
		t.Fatalf("priority 30000 not clamped to PriorityMax")
	}
	order := make(chan string, 10)
	cfg := fastConfig()
	cfg.Concurrency = 1
	startWorkerFor[prioTask](t, pool, (chan<- string)(order), cfg)
	var got []string
	for range 7 {
		got = append(got, recv(t, order, "the next job"))
	}
	want := "clamped,critical,high,normal-early,normal-late,low,min"
	if strings.Join(got, ",") != want {
		t.Fatalf("ran %v, want %s", got, want)
	}
}

// prioTask2 is prioTask under another kind.
type prioTask2 prioTask

func (prioTask2) Kind() string                 { return "prio2" }
func (p prioTask2) Priority() venturi.Priority { return p.P }
func (p prioTask2) Handle(ctx context.Context, run *venturi.Run[struct{}], order chan<- string) (venturi.Outcome, error) {
	order <- p.Name
	return venturi.Completed(), nil
}

// TestClaimOrderIsExactAcrossKinds: jobs of two kinds run in one order, by priority, then
// due time, whatever their kind.
func TestClaimOrderIsExactAcrossKinds(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	base := time.Now().Add(-time.Hour)
	enqueue(t, q, prioTask{"a-low-old", venturi.PriorityLow}, venturi.At(base))
	enqueue(t, q, prioTask2{"b-high-new", venturi.PriorityHigh}, venturi.At(base.Add(3*time.Minute)))
	enqueue(t, q, prioTask{"a-high-old", venturi.PriorityHigh}, venturi.At(base.Add(time.Minute)))
	enqueue(t, q, prioTask2{"b-normal", venturi.PriorityNormal}, venturi.At(base.Add(2*time.Minute)))
	enqueue(t, q, prioTask2{"b-low-new", venturi.PriorityLow}, venturi.At(base.Add(4*time.Minute)))
	order := make(chan string, 10)
	cfg := fastConfig()
	cfg.Concurrency = 1
	w := newWorker(t, pool, (chan<- string)(order), cfg)
	venturi.MustRegister[prioTask](w)
	venturi.MustRegister[prioTask2](w)
	startWorker(t, w)
	var got []string
	for range 5 {
		got = append(got, recv(t, order, "the next job"))
	}
	if want := "a-high-old,b-high-new,b-normal,a-low-old,b-low-new"; strings.Join(got, ",") != want {
		t.Fatalf("ran %v, want %s", got, want)
	}
}

// bulkTask goes to the queue "bulk"; bulkKeyed does too, with a dedup key.
type bulkTask struct{ N int }

func (bulkTask) Kind() string  { return "bulk" }
func (bulkTask) Queue() string { return "bulk" }
func (b bulkTask) Handle(ctx context.Context, run *venturi.Run[struct{}], seen chan<- string) (venturi.Outcome, error) {
	seen <- "bulk"
	return venturi.Completed(), nil
}

type bulkKeyed struct{ K string }

func (bulkKeyed) Kind() string                 { return "bulk_keyed" }
func (bulkKeyed) Queue() string                { return "bulk" }
func (b bulkKeyed) DedupKey() venturi.DedupKey { return venturi.DedupKey(b.K) }
func (b bulkKeyed) Handle(ctx context.Context, run *venturi.Run[struct{}], seen chan<- string) (venturi.Outcome, error) {
	seen <- "bulk_keyed"
	return venturi.Completed(), nil
}

type badQueueTask struct{}

func (badQueueTask) Kind() string  { return "bad_queue" }
func (badQueueTask) Queue() string { return "" }

// TestNamedQueueSeparatesWorkers: a task's Queue() puts its jobs in that queue through
// every enqueue path (one, many, dedup insert, dedup replace); a worker of the default
// queue that registered the kinds leaves them alone, and a worker of that queue runs them.
// An invalid queue name is refused, by Enqueue and by NewWorker.
func TestNamedQueueSeparatesWorkers(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	enqueue(t, q, bulkTask{N: 1})
	if _, err := q.EnqueueMany(ctx, []venturi.Task{bulkTask{N: 2}, bulkKeyed{K: "a"}}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, q, bulkKeyed{K: "b"})
	enqueue(t, q, bulkKeyed{K: "b"}) // replaces the pending job
	if n := countJobs(t, pool, "queue = 'bulk'"); n != 4 || countJobs(t, pool, "true") != 4 {
		t.Fatalf("%d jobs in queue bulk, want all 4", n)
	}
	seen := make(chan string, 8)
	other := newWorker(t, pool, (chan<- string)(seen), fastConfig()) // the default queue
	venturi.MustRegister[bulkTask](other)
	venturi.MustRegister[bulkKeyed](other)
	startWorker(t, other)
	cfg := fastConfig()
	cfg.Queue, cfg.ID = "bulk", "bulk-worker"
	w := newWorker(t, pool, (chan<- string)(seen), cfg)
	venturi.MustRegister[bulkTask](w)
	venturi.MustRegister[bulkKeyed](w)
	startWorker(t, w)
	eventually(t, within, "every bulk job to complete", func() bool {
		return countJobs(t, pool, "queue = 'bulk' AND state = 'completed'") == 4
	})
	if n := countJobs(t, pool, "queue = 'bulk' AND worker_id <> $1", cfg.ID); n != 0 {
		t.Fatalf("%d bulk jobs ran on a worker of another queue", n)
	}
	if _, err := q.Enqueue(ctx, badQueueTask{}); !errors.Is(err, venturi.ErrInvalidQueue) {
		t.Fatalf("empty queue name: %v, want ErrInvalidQueue", err)
	}
	var ce *venturi.ConfigError
	if _, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{Queue: strings.Repeat("q", 129)}); !errors.As(err, &ce) || ce.Field != "Queue" {
		t.Fatalf("NewWorker with a 129-byte queue: %v", err)
	}
}
