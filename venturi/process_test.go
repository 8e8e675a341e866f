package venturi_test

import (
	"bytes"
	"context"
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
// runs a worker until killed, so tests can SIGKILL and SIGSTOP a real process.
func TestMain(m *testing.M) {
	if schema := os.Getenv("VENTURI_TEST_WORKER"); schema != "" {
		os.Exit(workerProcess(schema))
	}
	os.Exit(m.Run())
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
	cfg, err := pgxpool.ParseConfig(os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
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
	if err := w.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
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
