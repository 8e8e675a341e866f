package main

// End-to-end tests: TestMain builds the binary once; each test makes a private schema
// with real jobs (a venturi worker in the test runs them), runs the binary as a
// subprocess with DATABASE_URL pointing at that schema, and checks its output and what
// it changed through the Go API.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// within bounds every wait: generous, for a loaded two-core machine.
const within = 60 * time.Second

// binary is the venturi binary TestMain builds.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "venturi-cli-test-")
	if err != nil {
		log.Fatal(err)
	}
	binary = filepath.Join(dir, "venturi")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		log.Fatalf("go build: %v\n%s", err, out)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's schema, a pool and Queue on it, and the DATABASE_URL that names it.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	q      *venturi.Queue
	schema string
	url    string
}

// newEnv makes a private, migrated schema.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := newBareEnv(t)
	if _, err := venturi.Migrate(t.Context(), e.pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return e
}

// newBareEnv makes a private, empty schema.
func newBareEnv(t *testing.T) *env {
	t.Helper()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema, 10)
	return &env{t: t, pool: pool, q: venturi.NewQueue(pool, venturi.QueueConfig{}), schema: schema,
		url: withSearchPath(t, testdb.URL(t), schema)}
}

// withSearchPath adds search_path to a database URL, as an operator names the schema.
func withSearchPath(t *testing.T, raw, schema string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse TEST_DATABASE_URL: %v", err)
	}
	v := u.Query()
	v.Set("search_path", schema)
	u.RawQuery = v.Encode()
	return u.String()
}

// result is what one run of the binary did.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs the binary with args against e's schema.
func (e *env) run(args ...string) result { return e.runWith(e.url, "", args...) }

// runWith runs the binary with DATABASE_URL set to dbURL (unset when empty) and stdin.
func (e *env) runWith(dbURL, stdin string, args ...string) result {
	e.t.Helper()
	return runBinary(e.t, dbURL, stdin, args...)
}

func runBinary(t *testing.T, dbURL, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "USER=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "USER=tester")
	if dbURL != "" {
		cmd.Env = append(cmd.Env, "DATABASE_URL="+dbURL)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run venturi %v: %v", args, err)
	}
	return r
}

// ok runs the binary and fails the test unless it exits 0.
func (e *env) ok(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("venturi %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// fails runs the binary and fails the test unless it exits with code.
func (e *env) fails(code int, args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != code {
		e.t.Fatalf("venturi %s: want exit %d, got %s", strings.Join(args, " "), code, r)
	}
	return r
}

// okJSON runs the binary with --json and decodes its output into v.
func (e *env) okJSON(v any, args ...string) {
	e.t.Helper()
	r := e.ok(append(args, "--json")...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		e.t.Fatalf("venturi %s --json: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
}

func contains(t *testing.T, r result, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("stdout lacks %q: %s", w, r)
		}
	}
}

func lacks(t *testing.T, s string, unwanted ...string) {
	t.Helper()
	for _, u := range unwanted {
		if strings.Contains(s, u) {
			t.Fatalf("output has %q:\n%s", u, s)
		}
	}
}

// lines counts the non-empty lines of s.
func lines(s string) int {
	n := 0
	for l := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

// ---- jobs and workers -------------------------------------------------------------------

type deps struct{}

// okTask completes with a note and an attachment.
type okTask struct {
	N int `json:"n"`
}

func (okTask) Kind() string { return "cli_ok" }

func (k okTask) Handle(_ context.Context, run *venturi.Run[struct{}], _ deps) (venturi.Outcome, error) {
	_ = run.SetAttachment(map[string]int{"n": k.N})
	return venturi.CompletedWith(fmt.Sprintf("done %d", k.N)), nil
}

// deadTask dies at its first run.
type deadTask struct {
	N int `json:"n"`
}

func (deadTask) Kind() string { return "cli_dead" }

func (k deadTask) Handle(context.Context, *venturi.Run[struct{}], deps) (venturi.Outcome, error) {
	return venturi.Outcome{}, venturi.Permanentf("boom %d: connection refused", k.N)
}

// waitTask memoizes a step, creates a hook, keeps a carry and waits for the signal
// confirm.
type waitTask struct{}

type waitCarry struct {
	Stage string `json:"stage"`
}

func (waitTask) Kind() string { return "cli_wait" }

func (waitTask) Handle(ctx context.Context, run *venturi.Run[waitCarry], _ deps) (venturi.Outcome, error) {
	if _, err := venturi.Step(ctx, run, "fetch", func(context.Context) (string, error) { return "page-1", nil }); err != nil {
		return venturi.Outcome{}, err
	}
	if _, err := run.CreateHook(ctx, "approve", time.Hour, false); err != nil {
		return venturi.Outcome{}, err
	}
	run.SetCarry(waitCarry{Stage: "awaiting approval"})
	return venturi.WaitForSignal(time.Hour, "confirm"), nil
}

// mailTask goes to the queue mail, which no worker of these tests serves.
type mailTask struct {
	To string `json:"to"`
}

func (mailTask) Kind() string  { return "cli_mail" }
func (mailTask) Queue() string { return "mail" }

// startWorker runs a worker on e's schema with the handlers above until the returned
// stop (or the test's end).
func (e *env) startWorker() (stop func()) {
	e.t.Helper()
	w, err := venturi.NewWorker(e.pool, deps{}, workerConfig())
	if err != nil {
		e.t.Fatalf("new worker: %v", err)
	}
	venturi.MustRegister[okTask](w)
	venturi.MustRegister[deadTask](w)
	venturi.MustRegister[waitTask](w)
	if err := w.Start(context.Background()); err != nil {
		e.t.Fatalf("start worker: %v", err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			e.t.Errorf("stop worker: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

func workerConfig() venturi.Config {
	return venturi.Config{
		Concurrency:         4,
		Lease:               10 * time.Second,
		PollInterval:        50 * time.Millisecond,
		MaintenanceInterval: 100 * time.Millisecond,
		StatsInterval:       100 * time.Millisecond,
		ShutdownGrace:       5 * time.Second,
		Logger:              slog.New(slog.DiscardHandler),
	}
}

func (e *env) enqueue(task venturi.Task, opts ...venturi.EnqueueOption) ulid.ULID {
	e.t.Helper()
	r, err := e.q.Enqueue(e.t.Context(), task, opts...)
	if err != nil {
		e.t.Fatalf("enqueue %+v: %v", task, err)
	}
	return r.ID
}

// job reads a job through the Go API.
func (e *env) job(id ulid.ULID) *venturi.Job {
	e.t.Helper()
	j, err := e.q.Job(e.t.Context(), id)
	if err != nil {
		e.t.Fatalf("job %s: %v", id, err)
	}
	return j
}

// waitState waits until job id is in state.
func (e *env) waitState(id ulid.ULID, state venturi.State) {
	e.t.Helper()
	eventually(e.t, fmt.Sprintf("job %s %s", id, state), func() bool { return e.job(id).State == state })
}

// eventually polls cond until it holds, and fails the test after within.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", within, what)
		case <-tick.C:
		}
	}
}

// fixture is a schema whose worker has run 3 okTasks (completed) and 2 deadTasks (dead),
// with a scheduled okTask an hour out and a mailTask available in queue mail; the worker
// has stopped, so the jobs stay where the commands put them.
type fixture struct {
	*env
	completed, dead []ulid.ULID
	scheduled, mail ulid.ULID
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{env: newEnv(t)}
	stop := f.startWorker()
	for i := range 3 {
		f.completed = append(f.completed, f.enqueue(okTask{N: i}))
	}
	for i := range 2 {
		f.dead = append(f.dead, f.enqueue(deadTask{N: i}))
	}
	f.scheduled = f.enqueue(okTask{N: 99}, venturi.After(time.Hour))
	f.mail = f.enqueue(mailTask{To: "ops@example.com"})
	for _, id := range f.completed {
		f.waitState(id, venturi.StateCompleted)
	}
	for _, id := range f.dead {
		f.waitState(id, venturi.StateDead)
	}
	stop()
	return f
}
