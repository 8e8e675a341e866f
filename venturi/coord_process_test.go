package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Durable coordination across OS processes: the signal, the hook's resumption, the cancel
// and the Await come from a client process (this test binary with VENTURI_TEST_CLIENT set,
// see TestMain), and a job that waits or runs steps in a worker process (startChild) is
// signalled or finished by this one.

// clientProcess runs one queue operation on schema with the arguments in
// VENTURI_TEST_ARGS (separated by U+001F) and prints its result on stdout.
func clientProcess(op, schema string) int {
	pool, err := childPool(schema)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	args := strings.Split(os.Getenv("VENTURI_TEST_ARGS"), "\x1f")
	id, _ := ulid.Parse(args[0])
	out := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	switch op {
	case "signal": // id, name, who, delivery ID
		res, err := q.Signal(ctx, id, args[1], approvedBy{By: args[2]}, args[3])
		out("stored=%v woke=%v err=%v", res.Stored, res.Woke, err)
	case "resume": // token, who
		got, res, err := q.ResumeHook(ctx, args[0], args[1])
		out("job=%s woke=%v invalid=%v err=%v", got, res.Woke, errors.Is(err, venturi.ErrHookInvalid), err)
	case "cancel": // id, reason
		res, err := q.Cancel(ctx, id, args[1])
		out("result=%v err=%v", res, err)
	case "await": // id
		fmt.Fprintln(os.Stderr, "AWAITING")
		j, err := q.Await(ctx, id)
		if err != nil {
			out("err=%v", err)
			break
		}
		out("state=%s event=%s note=%s", j.State, lastEntry(j).Event, lastEntry(j).Note)
	case "events": // -, cursor, max: read up to max events, a CURSOR line after each page
		eventsReader(ctx, q, venturi.EventCursor(args[1]), args[2], out)
	default:
		fmt.Fprintln(os.Stderr, "unknown op", op)
		return 2
	}
	return 0
}

// runClient runs op in a client process against pool's schema and returns its stdout.
func runClient(t *testing.T, pool *pgxpool.Pool, op string, args ...string) string {
	t.Helper()
	c := startClient(t, pool, op, args...)
	return c.wait(t)
}

// clientProc is a client process started by startClient.
type clientProc struct {
	cmd    *exec.Cmd
	stdout strings.Builder
	stderr child
}

func startClient(t *testing.T, pool *pgxpool.Pool, op string, args ...string) *clientProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	c := &clientProc{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(os.Environ(), "VENTURI_TEST_CLIENT="+op, "VENTURI_TEST_SCHEMA="+schemaOf(pool),
		"VENTURI_TEST_ARGS="+strings.Join(args, "\x1f"))
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *clientProc) wait(t *testing.T) string {
	t.Helper()
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("client process: %v\n%s", err, c.stderr.out.String())
	}
	return strings.TrimSpace(c.stdout.String())
}

// TestSignalFromAnotherProcess: a job waiting in this process's worker is woken by a
// signal another process sends; the repeated send (same delivery ID) stores nothing, and
// a send after the end is refused.
func TestSignalFromAnotherProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	startWorkerFor[approval](t, pool, struct{}{}, fastConfig())
	r := enqueue(t, q, approval{N: 1})
	waitState(t, q, r, venturi.StateWaiting)
	if got := runClient(t, pool, "signal", r.ID.String(), "approve", "the other process", "mail-1"); got != "stored=true woke=true err=<nil>" {
		t.Fatalf("first send: %s", got)
	}
	if got := runClient(t, pool, "signal", r.ID.String(), "approve", "the other process", "mail-1"); got != "stored=false woke=false err=<nil>" &&
		!strings.Contains(got, "already finished") {
		t.Fatalf("repeated send: %s", got)
	}
	j := waitState(t, q, r, venturi.StateCompleted)
	if n := lastEntry(j).Note; n != "approved by the other process (1 signals, carry 7)" {
		t.Fatalf("note %q", n)
	}
	if got := runClient(t, pool, "signal", r.ID.String(), "approve", "late", "mail-2"); !strings.Contains(got, "already finished") {
		t.Fatalf("send to a completed job: %s", got)
	}
}

// TestHookResumedFromAnotherProcess: the token a run handed out resumes its job from
// another process, once; the replay is refused there too.
func TestHookResumedFromAnotherProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := hookState{tokens: make(chan string, 1)}
	startWorkerFor[confirmable](t, pool, st, fastConfig())
	r := enqueue(t, q, confirmable{})
	token := recv(t, st.tokens, "the hook's token")
	waitState(t, q, r, venturi.StateWaiting)
	if got := runClient(t, pool, "resume", token, "carol"); got != fmt.Sprintf("job=%s woke=true invalid=false err=<nil>", r.ID) {
		t.Fatalf("resume: %s", got)
	}
	if got := runClient(t, pool, "resume", token, "mallory"); !strings.Contains(got, "invalid=true") {
		t.Fatalf("replayed token: %s", got)
	}
	if j := waitState(t, q, r, venturi.StateCompleted); lastEntry(j).Note != "confirmed by carol" {
		t.Fatalf("note %q", lastEntry(j).Note)
	}
}

// TestCancelFromAnotherProcess: a run in this process's worker stops when another process
// cancels its job; the job ends cancelled with the reason and the run's checkpoint note.
func TestCancelFromAnotherProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	startFlowWorkers[cancellable](t, pool, st, 1, fastConfig())
	r := enqueue(t, q, cancellable{N: 1, Hold: true})
	waitState(t, q, r, venturi.StateRunning)
	if got := runClient(t, pool, "cancel", r.ID.String(), "deleted elsewhere"); got != "result=requested err=<nil>" {
		t.Fatalf("cancel: %s", got)
	}
	j := waitState(t, q, r, venturi.StateCancelled)
	if e := lastEntry(j); e.Event != venturi.EventCancelled || e.Note != "deleted elsewhere: checkpoint at page 3" {
		t.Fatalf("entry %s %q", e.Event, e.Note)
	}
	if got := runClient(t, pool, "cancel", r.ID.String(), "again"); got != "result=already err=<nil>" {
		t.Fatalf("second cancel: %s", got)
	}
}

// TestAwaitFromAnotherProcess: another process awaits a job this process runs, and one
// that ended before its call.
func TestAwaitFromAnotherProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	st := flowState{g: newGauge(), hold: make(chan struct{})}
	startFlowWorkers[cancellable](t, pool, st, 1, fastConfig())
	r := enqueue(t, q, cancellable{N: 1, Hold: true})
	waitState(t, q, r, venturi.StateRunning)
	c := startClient(t, pool, "await", r.ID.String())
	eventually(t, within, "the client to call Await", func() bool { return c.stderr.saw("AWAITING") })
	close(st.hold)
	if got := c.wait(t); got != "state=completed event=completed note=" {
		t.Fatalf("await: %s", got)
	}
	if got := runClient(t, pool, "await", r.ID.String()); got != "state=completed event=completed note=" {
		t.Fatalf("await of an ended job: %s", got)
	}
}

// procSteps runs two memoized steps; its first run, in a worker process, blocks after the
// first step's memo committed, until the process is killed. Every execution of a step's
// body is counted in proc_step_exec.
type procSteps struct{}

func (procSteps) Kind() string { return "proc_steps" }
func (procSteps) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	var sum int
	for _, name := range []string{"s1", "s2"} {
		v, err := venturi.Step(ctx, run, name, func(ctx context.Context) (int, error) {
			return run.RunCount(), execStep(ctx, run, name)
		})
		if err != nil {
			return venturi.Outcome{}, err
		}
		sum = sum*10 + v
		if name == "s1" && run.RunCount() == 1 {
			fmt.Fprintf(os.Stderr, "STEP-1-MEMOIZED %s\n", run.ID())
			select {} // killed with its process, between the steps
		}
	}
	return venturi.CompletedWith(fmt.Sprintf("results %d", sum)), nil
}

// execPool is the pool a procSteps handler counts its executions with (set per process).
var execPool *pgxpool.Pool

func execStep(ctx context.Context, run *venturi.Run[struct{}], name string) error {
	_, err := execPool.Exec(ctx, `INSERT INTO proc_step_exec (job_id, step, run) VALUES ($1, $2, $3)`, run.ID().String(), name, run.RunCount())
	return err
}

// TestStepsResumeAfterTheirWorkerProcessDies: a worker process killed after a step's memo
// committed and before the next step; the job's next run, in this process, reads the
// first step back and runs only the second.
func TestStepsResumeAfterTheirWorkerProcessDies(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE proc_step_exec (job_id text, step text, run int)`); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, pool)
	r := enqueue(t, q, procSteps{})
	eventually(t, within, "the child to memoize step 1", func() bool { return c.saw("STEP-1-MEMOIZED " + r.ID.String()) })
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
	setExecPool(pool)
	startWorkerFor[procSteps](t, pool, struct{}{}, venturi.Config{Lease: time.Second, MaintenanceInterval: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, ID: "rescuer", Logger: testLogger()})
	j := waitState(t, q, r, venturi.StateCompleted)
	if got := eventsOf(j); got != "abandoned,completed" || lastEntry(j).Note != "results 12" {
		t.Fatalf("journal %s, note %q", got, lastEntry(j).Note)
	}
	var execs string
	if err := pool.QueryRow(ctx, `SELECT string_agg(step || '@' || run, ',' ORDER BY step, run) FROM proc_step_exec WHERE job_id = $1`, r.ID.String()).Scan(&execs); err != nil {
		t.Fatal(err)
	}
	if execs != "s1@1,s2@2" {
		t.Fatalf("step executions %s, want s1 in run 1 and s2 in run 2 only", execs)
	}
	steps, err := q.Steps(ctx, r.ID)
	if err != nil || len(steps) != 2 || steps[0].Name != "s1" || steps[0].Run != 1 || steps[1].Name != "s2" || steps[1].Run != 2 {
		t.Fatalf("Steps = %+v, %v", steps, err)
	}
}

// TestSignalAWaitInAnotherProcess: a job waits in a worker process; this process signals
// it, and the waiting process's next run reads the signal.
func TestSignalAWaitInAnotherProcess(t *testing.T) {
	slow(t)
	t.Parallel()
	pool, q := newQueue(t)
	startChild(t, pool)
	r := enqueue(t, q, approval{N: 1})
	waitState(t, q, r, venturi.StateWaiting)
	if res, err := q.Signal(context.Background(), r.ID, "approve", approvedBy{By: "parent"}, "p-1"); err != nil || !res.Woke {
		t.Fatalf("Signal = %+v, %v", res, err)
	}
	j := waitState(t, q, r, venturi.StateCompleted)
	if e := lastEntry(j); e.Note != "approved by parent (1 signals, carry 7)" || e.Worker != "child" {
		t.Fatalf("entry %+v", e)
	}
}

func setExecPool(p *pgxpool.Pool) { execPool = p }
