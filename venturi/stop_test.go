package venturi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
)

// cutTask runs until shutdown, checkpoints with a pause, and completes on its next run.
type cutTask struct{}

func (cutTask) Kind() string { return "cut" }

func (cutTask) Handle(ctx context.Context, run *venturi.Run[struct{}], started chan<- struct{}) (venturi.Outcome, error) {
	if run.RunCount() > 1 {
		return venturi.CompletedWith("resumed"), nil
	}
	started <- struct{}{}
	select {
	case <-run.Shutdown():
	case <-ctx.Done():
	}
	return venturi.PauseInWith(0, "checkpoint at shutdown"), nil
}

// TestStopKeepsDeadlineWhilePostgresUnreachable: with the network to PostgreSQL cut
// (a proxy that stops forwarding without closing, as a partition does), Stop with a 1s
// deadline returns by then (it took 12.4s before), and the job its running handler held
// is not lost: once the network heals, another worker rescues and completes it.
func TestStopKeepsDeadlineWhilePostgresUnreachable(t *testing.T) {
	slow(t)
	t.Parallel()
	ctx := context.Background()
	direct := newDB(t)
	q := venturi.NewQueue(direct, venturi.QueueConfig{})

	viaProxy, proxy := proxiedPool(t, direct)

	started := make(chan struct{}, 1)
	wcfg := fastConfig()
	wcfg.Lease = 2 * time.Second
	w := newWorker(t, viaProxy, (chan<- struct{})(started), wcfg)
	venturi.MustRegister[cutTask](w)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := q.Enqueue(ctx, cutTask{})
	if err != nil {
		t.Fatal(err)
	}
	recv(t, started, "the handler to start")

	proxy.Cut()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	begin := time.Now()
	err = w.Stop(sctx)
	took := time.Since(begin)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline's error", err)
	}
	t.Logf("Stop returned after %v", took)
	// Generous for a loaded machine; the defect was 12.4s.
	if took > 3*time.Second {
		t.Fatalf("Stop with a 1s deadline took %v while PostgreSQL was unreachable", took)
	}
	proxy.Heal()

	rescuer := newWorker(t, direct, (chan<- struct{})(started), fastConfig())
	venturi.MustRegister[cutTask](rescuer)
	startWorker(t, rescuer)
	j := waitState(t, q, r, venturi.StateCompleted)
	if last := j.Journal[len(j.Journal)-1]; last.Note != "resumed" {
		t.Fatalf("journal %+v", j.Journal)
	}
}
