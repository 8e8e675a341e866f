package venturi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// dueTask fails its first run with RetryIn(Retry) when Retry is set, and reports every
// run's start.
type dueTask struct {
	Retry time.Duration `json:"retry"`
}

func (dueTask) Kind() string { return "due" }

func (d dueTask) Handle(ctx context.Context, run *venturi.Run[struct{}], started chan<- int) (venturi.Outcome, error) {
	started <- run.RunCount()
	if d.Retry > 0 && run.RunCount() == 1 {
		return venturi.Outcome{}, venturi.RetryIn(d.Retry, errors.New("later"))
	}
	return venturi.Completed(), nil
}

// TestScheduledJobsStartWithoutAPoll: an idle worker whose poll and maintenance are an
// hour away still starts a delayed job, and a retry with a delay, when they come due: the
// claim reports when the next scheduled job is due and the worker wakes then. Before, a
// scheduled job waited for the maintenance leader's promotion tick or the next poll.
func TestScheduledJobsStartWithoutAPoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newDB(t)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	started := make(chan int, 8)
	cfg := fastConfig()
	cfg.PollInterval, cfg.MaintenanceInterval = time.Hour, time.Hour
	w := newWorker(t, pool, (chan<- int)(started), cfg)
	venturi.MustRegister[dueTask](w)
	startWorker(t, w)

	r, err := q.Enqueue(ctx, dueTask{}, venturi.After(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the delayed job to start")
	waitState(t, q, r, venturi.StateCompleted)

	r, err = q.Enqueue(ctx, dueTask{Retry: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if n := recv(t, started, "the first run"); n != 1 {
		t.Fatalf("run %d", n)
	}
	if n := recv(t, started, "the retry after its delay"); n != 2 {
		t.Fatalf("run %d", n)
	}
	j := waitState(t, q, r, venturi.StateCompleted)
	if j.Journal[0].Event != venturi.EventFailed || j.Journal[0].ResumeIn != 300*time.Millisecond {
		t.Fatalf("journal %+v", j.Journal)
	}
}
