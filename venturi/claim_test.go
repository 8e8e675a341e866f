package venturi_test

import (
	"context"
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
