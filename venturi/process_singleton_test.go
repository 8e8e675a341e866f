package venturi_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// procLease is the lease of the singleton worker processes.
const procLease = 2 * time.Second

// procService is the singleton the worker processes run: a loop that counts ticks in its
// carry, checkpoints each and hands over at shutdown.
type procService struct{}

func (procService) Kind() string { return "proc_service" }
func (procService) Singleton() venturi.Singleton {
	return venturi.Singleton{Restart: venturi.RestartAlways, Delay: 10 * time.Millisecond}
}
func (procService) Handle(ctx context.Context, run *venturi.Run[serviceCarry], _ struct{}) (venturi.Outcome, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	c := run.CarryMut()
	for {
		select {
		case <-run.Shutdown():
			return venturi.PauseInWith(0, fmt.Sprintf("handover at tick %d", c.Ticks)), nil
		case <-ctx.Done():
			return venturi.Outcome{}, ctx.Err()
		case <-tick.C:
			c.Ticks++
			if err := run.Checkpoint(ctx); err != nil {
				return venturi.Outcome{}, err
			}
		}
	}
}

// singletonProcess runs a worker of procService until SIGTERM (a graceful stop) or SIGKILL.
func singletonProcess(schema string) int {
	pool, err := childPool(schema)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		ID: os.Getenv("VENTURI_TEST_WORKER_ID"), Lease: procLease, ShutdownGrace: 5 * time.Second,
		MaintenanceInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	venturi.MustRegister[procService](w)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func startSingletonChild(t *testing.T, pool *pgxpool.Pool, id string) *child {
	t.Helper()
	c := &child{}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), "VENTURI_TEST_SINGLETON="+schemaOf(pool), "VENTURI_TEST_WORKER_ID="+id)
	c.cmd.Stderr, c.cmd.Stdout = c, c
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
	return c
}

// TestSingletonAcrossProcesses: three worker processes serve one singleton. Its owner is
// killed (SIGKILL): another process takes it over within lease + 2 s, resuming from the
// checkpointed carry. The new owner is stopped gracefully (SIGTERM): its run pauses and a
// third process takes over without waiting for a lease. By the journal's run times, no two
// runs ever overlapped.
func TestSingletonAcrossProcesses(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	children := map[string]*child{}
	for i := range 3 {
		id := fmt.Sprintf("p%d", i)
		children[id] = startSingletonChild(t, pool, id)
	}
	// owner waits until the service runs on a process not in gone, with a checkpoint of at
	// least minTicks, and returns it.
	owner := func(gone map[string]bool, minTicks int) (venturi.SingletonStatus, int) {
		t.Helper()
		var s venturi.SingletonStatus
		var ticks int
		eventually(t, within, "the service to run on a live process", func() bool {
			list, err := q.Singletons(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0].State != venturi.StateRunning || gone[list[0].Owner] {
				return false
			}
			s = list[0]
			var c serviceCarry
			decodeCarry(t, jobByID(t, q, s.ID), &c)
			ticks = c.Ticks
			return ticks >= minTicks
		})
		return s, ticks
	}
	gone := map[string]bool{}
	first, ticks := owner(gone, 5)
	if n := countJobs(t, pool, "kind = 'proc_service'"); n != 1 {
		t.Fatalf("%d singleton jobs, want 1", n)
	}

	// SIGKILL the owner.
	victim := children[first.Owner]
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	var killedAt time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&killedAt); err != nil {
		t.Fatal(err)
	}
	gone[first.Owner] = true
	// The carry resumes from the checkpoint, and grows: the new owner's handler runs (a
	// claimed job whose handler has not started yet would be released without a run).
	second, _ := owner(gone, ticks+1)
	if took := second.StartedAt.Sub(killedAt); took > procLease+2*time.Second {
		t.Fatalf("takeover took %v after the kill, want at most lease + 2s = %v", took, procLease+2*time.Second)
	}
	j := jobByID(t, q, second.ID)
	if e := lastEntry(j); e.Event != venturi.EventAbandoned || e.Worker != first.Owner {
		t.Fatalf("after the kill: %+v", e)
	}

	// SIGTERM the new owner: a graceful handover.
	if err := children[second.Owner].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	gone[second.Owner] = true
	j = waitJob(t, q, second.ID, "the handover entry", func(j *venturi.Job) bool { return lastEntry(j).Event != venturi.EventAbandoned })
	handover := lastEntry(j)
	var handedOver int
	if _, err := fmt.Sscanf(handover.Note, "handover at tick %d", &handedOver); err != nil ||
		handover.Event != venturi.EventPaused || handover.Worker != second.Owner {
		t.Fatalf("after the graceful stop: %+v", handover)
	}
	third, _ := owner(gone, handedOver+1) // its handler runs from the handover's checkpoint
	if wait := third.StartedAt.Sub(handover.At); wait >= procLease {
		t.Fatalf("the handover took %v: a lease wait (lease %v)", wait, procLease)
	}
	if err := children[second.Owner].cmd.Wait(); err != nil {
		t.Fatalf("the gracefully stopped process: %v\n%s", err, children[second.Owner].out.String())
	}

	// Stop the last one; the journal's runs never overlap.
	if err := children[third.Owner].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = children[third.Owner].cmd.Wait()
	runs := runsOf(fullJournal(t, q, third.ID))
	if len(runs) < 3 {
		t.Fatalf("%d runs in the journal", len(runs))
	}
	if o := overlaps(runs); o != "" {
		t.Fatal("overlapping runs: " + o)
	}
	if !children[third.Owner].saw("venturi singleton started") || !children[third.Owner].saw("venturi singleton stopped") {
		t.Fatalf("the owner's log lacks the singleton's start and stop:\n%s", children[third.Owner].out.String())
	}
}
