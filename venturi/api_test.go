package venturi_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// digest stands for a task type owned by a producer package: the worker cannot add a
// Handle method to it, so it registers a function.
type digest struct {
	User string   `json:"user"`
	IDs  []string `json:"ids"`
}

type digestCarry struct{ Sent int }

func (digest) Kind() string                 { return "digest" }
func (d digest) DedupKey() venturi.DedupKey { return venturi.KeyOf("user", d.User) }
func (d digest) Merge(existing venturi.Pending[digest, digestCarry]) venturi.Merge[digest, digestCarry] {
	ids := slices.Clone(existing.Payload.IDs)
	for _, id := range d.IDs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return existing.With(digest{User: d.User, IDs: ids}, existing.Carry)
}

// TestRegisterFuncForForeignTaskType: a handler function for a type the worker does not
// own keeps the type's kind, dedup key and merge; its carry type is checked against Merge.
func TestRegisterFuncForForeignTaskType(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	first := enqueue(t, q, digest{User: "ann", IDs: []string{"a"}}, venturi.After(time.Hour))
	second, err := q.Enqueue(ctx, digest{User: "ann", IDs: []string{"b", "a"}}, venturi.After(time.Hour))
	if err != nil || second.Action != venturi.ActionMerged || second.ID != first.ID {
		t.Fatalf("second enqueue = %+v, %v; want merged into %s", second, err, first.ID)
	}
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET run_at = now(), state = 'available'`); err != nil {
		t.Fatal(err)
	}
	got := make(chan []string, 1)
	w := newWorker(t, pool, "state", venturi.Config{})
	venturi.MustRegisterFunc(w, func(ctx context.Context, d digest, run *venturi.Run[digestCarry], s string) (venturi.Outcome, error) {
		got <- d.IDs
		return venturi.Completed(), nil
	})
	startWorker(t, w)
	waitState(t, q, first, venturi.StateCompleted)
	if ids := <-got; !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("handler saw ids %v, want [a b]", ids)
	}

	w2 := newWorker(t, pool, "state", venturi.Config{})
	err = venturi.RegisterFunc(w2, func(ctx context.Context, d digest, run *venturi.Run[int], s string) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	})
	if err == nil {
		t.Fatal("RegisterFuncSafely accepted a handler whose carry differs from Merge's")
	}
}

func TestMergeAccessors(t *testing.T) {
	t.Parallel()
	p := venturi.Pending[digest, digestCarry]{Payload: digest{User: "u", IDs: []string{"x"}}, Carry: digestCarry{Sent: 2}}
	m := digest{User: "u", IDs: []string{"y"}}.Merge(p)
	if m.Decision() != venturi.ActionMerged || !slices.Equal(m.Task().IDs, []string{"x", "y"}) || m.Carry().Sent != 2 {
		t.Fatalf("merge = %v %+v %+v", m.Decision(), m.Task(), m.Carry())
	}
	if k := p.Keep(); k.Decision() != venturi.ActionKept || k.Task().User != "" {
		t.Fatalf("keep = %v %+v", k.Decision(), k.Task())
	}
}

// ptrTask is handled through its pointer type.
type ptrTask struct{ N int }

func (*ptrTask) Kind() string { return "ptr_task" }

func (p *ptrTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.CompletedWith("n=" + string(rune('0'+p.N))), nil
}

func TestRegisterPointerTaskType(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	startWorkerFor[*ptrTask](t, pool, struct{}{}, venturi.Config{})
	r := enqueue(t, q, &ptrTask{N: 7})
	if j := waitState(t, q, r, venturi.StateCompleted); j.Journal[0].Note != "n=7" {
		t.Fatalf("journal %+v", j.Journal)
	}
}

type retryInTask struct{}

func (retryInTask) Kind() string { return "retry_in" }

func (retryInTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() == 1 {
		return venturi.Outcome{}, venturi.RetryIn(time.Hour, errors.New("429: retry after an hour"))
	}
	return venturi.Completed(), nil
}

// TestRetryInOverridesBackoff: a RetryIn error schedules the retry after its own delay
// (here an hour, where the backoff would retry at once) and still counts as a failure.
func TestRetryInOverridesBackoff(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	startWorkerFor[retryInTask](t, pool, struct{}{}, venturi.Config{})
	r := enqueue(t, q, retryInTask{})
	j := waitState(t, q, r, venturi.StateScheduled)
	if j.Failures != 1 || j.Journal[0].Event != venturi.EventFailed || j.Journal[0].ResumeIn != time.Hour {
		t.Fatalf("job %+v journal %+v", j, j.Journal)
	}
	var minutes float64
	if err := pool.QueryRow(context.Background(), `SELECT extract(epoch FROM run_at - now()) / 60 FROM venturi_job`).Scan(&minutes); err != nil {
		t.Fatal(err)
	}
	if minutes < 55 || minutes > 61 {
		t.Fatalf("retry due in %.1f minutes, want about 60", minutes)
	}
}
