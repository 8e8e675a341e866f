package browsertest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/dashboard"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// screenshots, when set, is the directory the test writes a PNG of each view into
// (make dashboard/screenshots writes venturi/dashboard/docs).
var screenshots = flag.String("screenshots", "", "write a PNG of each view into this directory")

// within bounds every wait: generous, so that a loaded machine does not turn slowness
// into a failure.
const within = 60 * time.Second

// The task types of the stack.

// flaky fails permanently until the state's fixed flag is set: it dies on its first run,
// and completes when retried after the "fix".
type flaky struct {
	Order int    `json:"order"`
	Email string `json:"email"`
}

func (flaky) Kind() string { return "billing.charge" }

// work runs in the queue "batch", which the test pauses.
type work struct {
	N int `json:"n"`
}

func (work) Kind() string  { return "report.render" }
func (work) Queue() string { return "batch" }

// probe is a job of the default queue that completes at once: when one completes, the
// worker is claiming.
type probe struct {
	N int `json:"n"`
}

func (probe) Kind() string { return "probe" }

// fetch fails every run; the breaker of its host opens after three failures in a row.
type fetch struct {
	Host string `json:"host"`
}

func (fetch) Kind() string { return "feed.fetch" }
func (fetch) Limits() venturi.Limits {
	return venturi.Limits{Breaker: venturi.Breaker{Failures: 3, Cooldown: time.Hour, PerPartition: true}}
}
func (f fetch) Partition() string { return f.Host }

// state is the worker's shared state.
type state struct {
	fixed atomic.Bool // flaky jobs complete once it is set
}

// stack is a migrated private schema, a worker running on it, and the dashboard served on
// httptest.
type stack struct {
	pool  *pgxpool.Pool
	q     *venturi.Queue
	state *state
	srv   *httptest.Server
	base  string // the dashboard's URL: srv.URL + "/ops"
}

// actor is the name the dashboard's actions are audited under.
const actor = "browser-test"

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.Schema(t), 20)
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	s := &stack{pool: pool, q: venturi.NewQueue(pool, venturi.QueueConfig{}), state: &state{}}
	w, err := venturi.NewWorker(pool, s.state, venturi.Config{
		Queues:              []venturi.WorkerQueue{{Name: venturi.DefaultQueue}, {Name: "batch"}},
		Concurrency:         4,
		MaxFailures:         5,
		Backoff:             venturi.Backoff{Base: 10 * time.Millisecond, Cap: 20 * time.Millisecond},
		MaintenanceInterval: 50 * time.Millisecond,
		StatsInterval:       200 * time.Millisecond,
		PollInterval:        100 * time.Millisecond,
		ID:                  "worker-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	must(t, venturi.RegisterFunc(w, func(ctx context.Context, f flaky, run *venturi.Run[struct{}], st *state) (venturi.Outcome, error) {
		cust, err := venturi.Step(ctx, run, "lookup-customer", func(context.Context) (map[string]string, error) {
			return map[string]string{"customer": "cus_" + f.Email}, nil
		})
		if err != nil {
			return venturi.Outcome{}, err
		}
		_ = run.SetAttachment(map[string]any{"gateway": "sandbox", "status": 502, "customer": cust["customer"]})
		if !st.fixed.Load() {
			return venturi.Outcome{}, venturi.Permanentf("card gateway answered 502 for order %d", f.Order)
		}
		return venturi.CompletedWith(fmt.Sprintf("charged order %d", f.Order)), nil
	}))
	must(t, venturi.RegisterFunc(w, func(ctx context.Context, j work, run *venturi.Run[struct{}], st *state) (venturi.Outcome, error) {
		return venturi.CompletedWith(fmt.Sprintf("rendered report %d", j.N)), nil
	}))
	must(t, venturi.RegisterFunc(w, func(ctx context.Context, p probe, run *venturi.Run[struct{}], st *state) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	}))
	must(t, venturi.RegisterFunc(w, func(ctx context.Context, f fetch, run *venturi.Run[struct{}], st *state) (venturi.Outcome, error) {
		return venturi.Outcome{}, errors.New("dial tcp: connection refused")
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	dash, err := dashboard.New(s.q, dashboard.Config{
		Prefix:  "/ops",
		Refresh: time.Second,
		Access: func(*http.Request) dashboard.Access {
			return dashboard.Access{Actor: actor, Grants: dashboard.AllActions}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", dash)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	s.base = s.srv.URL + "/ops"
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// enqueue enqueues a task or fails the test.
func (s *stack) enqueue(t *testing.T, task venturi.Task, opts ...venturi.EnqueueOption) ulid.ULID {
	t.Helper()
	res, err := s.q.Enqueue(context.Background(), task, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

// awaitJob waits until job id satisfies cond.
func (s *stack) awaitJob(t *testing.T, id ulid.ULID, what string, cond func(*venturi.Job) bool) *venturi.Job {
	t.Helper()
	var j *venturi.Job
	waitFor(t, what, func() (bool, error) {
		var err error
		j, err = s.q.Job(context.Background(), id)
		return err == nil && cond(j), err
	})
	return j
}

// awaitStats waits for a stats sample taken after every change made so far: the
// maintaining worker samples every StatsInterval.
func (s *stack) awaitStats(t *testing.T) {
	t.Helper()
	var now time.Time
	if err := s.pool.QueryRow(context.Background(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a stats sample", func() (bool, error) {
		st, err := s.q.Stats(context.Background())
		return err == nil && st.SampledAt.After(now), err
	})
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		<-tick.C
	}
	t.Fatalf("timed out after %v waiting for %s (last error: %v)", within, what, lastErr)
}

// chromium finds the browser: CHROMIUM_PATH (scripts/chromium.sh with -- sets it), or
// chromium, chromium-browser or google-chrome on PATH. A missing browser fails the test:
// it never skips.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found: run the test with `make test/dashboard` (scripts/chromium.sh installs the Debian package " +
		"chromium when missing), or set CHROMIUM_PATH to the browser")
	return ""
}

// shot writes a PNG of the view, when -screenshots names a directory.
func shot(t *testing.T, b *browser, name string) {
	t.Helper()
	if *screenshots == "" {
		return
	}
	if b.count(t, "[data-live-page]") > 0 { // a live page: shoot it once its script has polled
		b.waitJS(t, "the page's script to poll the stats", `document.body.hasAttribute("data-polled")`)
	}
	png := b.screenshot(t)
	if err := os.MkdirAll(*screenshots, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*screenshots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
