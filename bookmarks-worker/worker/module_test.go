package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/config"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/handlers"
	"github.com/venturi-dev/bookmarks/shared/tasks"
	"github.com/venturi-dev/bookmarks/shared/telemetry/telemetrytest"
	"github.com/venturi-dev/bookmarks/sql/dbtest"
	"github.com/venturi-dev/bookmarks/sql/migrations"
)

func TestModuleGraphIsValid(t *testing.T) {
	if err := fx.ValidateApp(Module, fx.Supply(slog.New(slog.NewTextHandler(io.Discard, nil)))); err != nil {
		t.Fatal(err)
	}
}

// TestModuleStartsAndStops runs the real graph against a migrated schema: OnStart must
// return (the worker runs in the background) and OnStop must stop it.
func TestModuleStartsAndStops(t *testing.T) {
	ctx := context.Background()
	dsn := dbtest.SchemaURL(t, "bmfx")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	t.Setenv("DATABASE_URL", dsn)
	t.Setenv("BOOKMARKS_WORKER_METRICS_ADDR", "") // disabled: nothing listens
	var w *handlers.Worker
	var m *MetricsEndpoint
	app := fxtest.New(t, Module, fx.Supply(slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&w, &m))
	app.RequireStart()
	if w == nil || w.ID() == "" {
		t.Fatal("no worker")
	}
	if m.Addr() != nil {
		t.Fatalf("metrics listening on %v although disabled", m.Addr())
	}
	app.RequireStop()
}

// TestModuleServesMetrics: the real graph serves GET /metrics on its own listener, with
// the series of the runs it made (venturi's middleware is wired in) and the Go and process
// metrics; the queue gauges are the API's, not the worker's.
func TestModuleServesMetrics(t *testing.T) {
	ctx := context.Background()
	dsn := dbtest.SchemaURL(t, "bmmet")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", dsn)
	t.Setenv("BOOKMARKS_WORKER_METRICS_ADDR", "127.0.0.1:0")
	t.Setenv("BOOKMARKS_WORKER_POLL", "50ms")
	var m *MetricsEndpoint
	var a *handlers.App
	app := fxtest.New(t, Module, fx.Supply(slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&m, &a))
	app.RequireStart()
	defer app.RequireStop()
	if _, err := a.Queue.Enqueue(ctx, tasks.RebuildTagIndex{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	body := telemetrytest.AwaitScrape(t, "http://"+m.Addr().String()+"/metrics", 30*time.Second,
		`venturi_jobs_enqueued_total{action="inserted",kind="rebuild_tag_index",queue="default"} 1`,
		`venturi_jobs_finished_total{kind="rebuild_tag_index",outcome="completed",queue="default"} 1`,
		`venturi_job_wait_seconds_count{kind="rebuild_tag_index",queue="default"} 1`,
		`venturi_job_run_duration_seconds_count{kind="rebuild_tag_index",outcome="completed",queue="default"} 1`,
		"go_goroutines ", "process_cpu_seconds_total ", `target_info{service_name="bookmarks-worker"`)
	if strings.Contains(body, "venturi_queue_depth") {
		t.Errorf("the worker exports the queue gauges (the API's)")
	}
}

// TestStopTimeoutCoversTheShutdown: fx's stop timeout is longer than venturi's whole
// graceful shutdown (grace, the wait for handlers that ignore cancellation, the last
// writes), so a normal stop never cuts it short.
func TestStopTimeoutCoversTheShutdown(t *testing.T) {
	for _, cfg := range []config.Config{
		{ShutdownGrace: 10 * time.Second, Lease: 30 * time.Second},
		{ShutdownGrace: time.Second, Lease: 2 * time.Second},
		{ShutdownGrace: time.Minute, Lease: time.Minute},
	} {
		if got, need := StopTimeout(cfg), cfg.ShutdownGrace+min(5*time.Second, cfg.Lease/2); got <= need {
			t.Errorf("StopTimeout(%+v) = %v, not above the shutdown's %v", cfg, got, need)
		}
	}
}

// TestTheWorkerRunsEveryRegistration: the worker the fx graph builds has every kind of
// handlers.Registrations() registered (a second registration of each is refused), so the
// list is the only place a kind is added. Building the graph connects to nothing.
func TestTheWorkerRunsEveryRegistration(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://registration.invalid/none")
	var w *handlers.Worker
	app := fx.New(Module, fx.Supply(slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&w), fx.NopLogger)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	regs := handlers.Registrations()
	if len(regs) == 0 {
		t.Fatal("no registrations")
	}
	for i, reg := range regs {
		if err := reg(w); err == nil {
			t.Errorf("registration %d was not in the fx group: it registered again", i)
		}
	}
}

// TestTestOnlySettingsWarnAtStart: a worker started with a test-only setting logs a
// warning naming it, before anything else; one without logs no warning.
func TestTestOnlySettingsWarnAtStart(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string // the warning's test_only_settings; nil: no warning
	}{
		{"none", nil, nil},
		{"loopback port", map[string]string{"BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT": "8000"},
			[]string{"BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT=8000: the fetcher may connect to 127.0.0.1:8000"}},
		{"static hosts", map[string]string{"BOOKMARKS_FETCH_STATIC_HOSTS": "meta.test=169.254.169.254"},
			[]string{"BOOKMARKS_FETCH_STATIC_HOSTS=meta.test=169.254.169.254: these names resolve without DNS"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", "postgres://registration.invalid/none")
			t.Setenv("BOOKMARKS_FETCH_ALLOW_LOOPBACK_PORT", "")
			t.Setenv("BOOKMARKS_FETCH_STATIC_HOSTS", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			app := fx.New(Module, fx.Supply(log), fx.NopLogger) // builds the graph; connects to nothing
			if err := app.Err(); err != nil {
				t.Fatal(err)
			}
			var first struct {
				Level    string   `json:"level"`
				Msg      string   `json:"msg"`
				Settings []string `json:"test_only_settings"`
			}
			line, _, _ := strings.Cut(buf.String(), "\n")
			if tt.want == nil {
				if strings.Contains(buf.String(), "TEST-ONLY") {
					t.Fatalf("a warning without test-only settings:\n%s", buf.String())
				}
				return
			}
			if err := json.Unmarshal([]byte(line), &first); err != nil {
				t.Fatalf("first log line %q: %v", line, err)
			}
			if first.Level != "WARN" || first.Msg != TestOnlyWarning || !slices.Equal(first.Settings, tt.want) {
				t.Fatalf("first log line = %+v, want the WARN %q with %q", first, TestOnlyWarning, tt.want)
			}
		})
	}
}
