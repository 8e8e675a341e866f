package venturi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// TestMain doubles the test binary as a worker process: with VENTURI_TEST_WORKER set it
// runs a worker until killed, so tests can SIGKILL and SIGSTOP a real process. With
// VENTURI_TEST_CLIENT set it runs one queue operation (coord_process_test.go) and exits;
// with VENTURI_TEST_SAMPLER, a stats-sampling worker (ops_process_test.go).
func TestMain(m *testing.M) {
	if schema := os.Getenv("VENTURI_TEST_WORKER"); schema != "" {
		os.Exit(workerProcess(schema))
	}
	if op := os.Getenv("VENTURI_TEST_CLIENT"); op != "" {
		os.Exit(clientProcess(op, os.Getenv("VENTURI_TEST_SCHEMA")))
	}
	if schema := os.Getenv("VENTURI_TEST_SINGLETON"); schema != "" {
		os.Exit(singletonProcess(schema))
	}
	if schema := os.Getenv("VENTURI_TEST_SAMPLER"); schema != "" {
		os.Exit(samplerProcess(schema))
	}
	os.Exit(m.Run())
}

// childPool is a child process's pool on the test database's schema.
func childPool(schema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// zombieTask blocks on its first run, ignoring cancellation, then completes; later runs
// complete at once.
type zombieTask struct {
	Hold time.Duration `json:"hold"`
}

func (zombieTask) Kind() string { return "zombie" }

func (z zombieTask) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if run.RunCount() == 1 {
		fmt.Fprintf(os.Stderr, "HANDLER-STARTED %s\n", run.ID())
		<-time.After(z.Hold) // deliberately ignores ctx: a handler that will not stop
		return venturi.CompletedWith("first run finished late"), nil
	}
	return venturi.CompletedWith(fmt.Sprintf("run %d", run.RunCount())), nil
}

func workerProcess(schema string) int {
	pool, err := childPool(schema)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{Lease: time.Second, ID: "child", MaintenanceInterval: time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	venturi.MustRegister[zombieTask](w)
	venturi.MustRegister[procSlot](w)
	venturi.MustRegister[approval](w)
	venturi.MustRegister[procSteps](w)
	venturi.MustRegister[procFlow](w)
	setExecPool(pool)
	if err := w.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// procSlot takes the slot "proc" under Policy. With Block it blocks on its first run until
// Run.Shutdown closes (then returns an error) or forever when Deaf is set too; later runs
// and unblocked jobs complete at once.
type procSlot struct {
	N      int                `json:"n"`
	Policy venturi.SlotPolicy `json:"policy"`
	Block  bool               `json:"block"`
	Deaf   bool               `json:"deaf"`
}

func (procSlot) Kind() string { return "proc_slot" }
func (p procSlot) Slot() venturi.Slot {
	return venturi.Slot{Key: "proc", Limit: 1, Policy: p.Policy}
}
func (p procSlot) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	if p.Block && run.RunCount() == 1 {
		fmt.Fprintf(os.Stderr, "HANDLER-STARTED %s\n", run.ID())
		if p.Deaf {
			select {} // killed with its process
		}
		select {
		case <-run.Shutdown():
			fmt.Fprintf(os.Stderr, "SHUTDOWN-SEEN %s\n", run.ID())
			return venturi.Outcome{}, errors.New("stopped")
		case <-ctx.Done():
			return venturi.Outcome{}, ctx.Err()
		}
	}
	return venturi.CompletedWith(fmt.Sprintf("job %d", p.N)), nil
}

// TestKilledWorkerFreesItsSlot: a worker process killed while its job holds a slot
// (limit 1) keeps the slot until the lease rescue returns the job; then another worker
// runs the waiting job and the rescued one, never two at once by the journal.
func TestKilledWorkerFreesItsSlot(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	c := startChild(t, pool)
	held := enqueue(t, q, procSlot{N: 1, Block: true, Deaf: true})
	c.waitHandlerStarted(t, held)
	waiting := enqueue(t, q, procSlot{N: 2})
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
	startWorkerFor[procSlot](t, pool, struct{}{}, venturi.Config{Lease: time.Second, MaintenanceInterval: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, ID: "rescuer", Logger: testLogger()})
	a := waitState(t, q, held, venturi.StateCompleted)
	b := waitState(t, q, waiting, venturi.StateCompleted)
	if eventsOf(a) != "abandoned,completed" || eventsOf(b) != "completed" {
		t.Fatalf("journals: %s / %s", eventsOf(a), eventsOf(b))
	}
	abandoned := a.Journal[0]
	if start := b.Journal[0].StartedAt; start.Before(abandoned.At) {
		t.Fatalf("the waiting job started at %v, before the killed run's slot was freed at %v", start, abandoned.At)
	}
}

// TestReplaceStopsARunInAnotherProcess: a SlotReplace job enqueued while a worker process
// runs its slot's job stops that run through a notification: the other process's handler
// sees Run.Shutdown, its job ends replaced (cancelled, not failed), and the newer one runs.
func TestReplaceStopsARunInAnotherProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	c := startChild(t, pool)
	old := enqueue(t, q, procSlot{N: 1, Policy: venturi.SlotReplace, Block: true})
	c.waitHandlerStarted(t, old)
	cfg := fastConfig()
	cfg.ID = "replacer"
	startWorkerFor[procSlot](t, pool, struct{}{}, cfg)
	newer := enqueue(t, q, procSlot{N: 2, Policy: venturi.SlotReplace})
	eventually(t, within, "the child's handler to see Run.Shutdown", func() bool { return c.saw("SHUTDOWN-SEEN " + old.ID.String()) })
	j := waitState(t, q, old, venturi.StateCancelled)
	if e := lastEntry(j); e.Event != venturi.EventReplaced || e.Worker != "child" || j.Failures != 0 {
		t.Fatalf("replaced job: %+v, failures %d", e, j.Failures)
	}
	waitState(t, q, newer, venturi.StateCompleted)
}

// child is a worker process whose stderr the test can watch.
type child struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *child) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

func (c *child) saw(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Contains(c.out.String(), s)
}

func startChild(t *testing.T, pool *pgxpool.Pool) *child {
	t.Helper()
	c := &child{}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), "VENTURI_TEST_WORKER="+schemaOf(pool))
	c.cmd.Stderr = c
	c.cmd.Stdout = c
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
	return c
}

// waitHandlerStarted waits until the child has started the handler of r's job.
func (c *child) waitHandlerStarted(t *testing.T, r venturi.Result) {
	t.Helper()
	eventually(t, within, "the child to start the handler", func() bool { return c.saw("HANDLER-STARTED " + r.ID.String()) })
}

// startRescuer starts the in-process worker that rescues the child's job and runs it again.
func startRescuer(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	startWorkerFor[zombieTask](t, pool, struct{}{}, venturi.Config{Lease: time.Second, MaintenanceInterval: 100 * time.Millisecond, ID: "rescuer", Logger: testLogger()})
}

// TestKilledWorkerProcess: a worker process killed with SIGKILL mid-run has its job
// rescued (abandoned entry, counted as a failure) and completed by another worker.
func TestKilledWorkerProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	c := startChild(t, pool)
	r := enqueue(t, q, zombieTask{Hold: time.Hour})
	c.waitHandlerStarted(t, r)
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()

	startRescuer(t, pool)
	j := waitState(t, q, r, venturi.StateCompleted)
	if got := eventsOf(j); got != "abandoned,completed" {
		t.Fatalf("journal events = %s, want abandoned,completed", got)
	}
	if j.Journal[0].Worker != "child" || j.Journal[1].Worker != "rescuer" || j.Failures != 1 {
		t.Fatalf("journal = %+v, failures = %d", j.Journal, j.Failures)
	}
	if j.Journal[0].Token == j.Journal[1].Token {
		t.Fatalf("both runs share fencing token %d", j.Journal[0].Token)
	}
}

// TestStalledWorkerProcessIsFenced: a worker process stopped (SIGSTOP) past its lease is
// rescued; when it resumes (SIGCONT) and its handler finishes, its result is discarded:
// the journal keeps exactly the rescuer's completion.
func TestStalledWorkerProcessIsFenced(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	c := startChild(t, pool)
	r := enqueue(t, q, zombieTask{Hold: 3 * time.Second})
	c.waitHandlerStarted(t, r)
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	startRescuer(t, pool)
	waitState(t, q, r, venturi.StateCompleted)
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The zombie's handler returns within its 3 s hold; the worker must drop its result.
	eventually(t, within, "the resumed worker to discard its lost run", func() bool {
		return c.saw("lease lost") || c.saw("run result discarded")
	})
	j := jobByID(t, q, r.ID)
	if got := eventsOf(j); got != "abandoned,completed" || j.Journal[1].Worker != "rescuer" {
		t.Fatalf("journal = %+v", j.Journal)
	}
}
