package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/apikey"
	"github.com/venturi-dev/bookmarks/shared/telemetry/telemetrytest"
	"github.com/venturi-dev/bookmarks/sql/dbtest"
	"github.com/venturi-dev/bookmarks/sql/migrations"
	"github.com/venturi-dev/venturi"
)

// The API serves GET /metrics on a listener of its own, without a key: venturi's enqueue
// counter after a bookmark's fetch was enqueued, the queue gauges of venturi's stats
// table once a worker sampled it, and the Go and process metrics. The API's own listener
// does not serve /metrics.
func TestServeExposesMetrics(t *testing.T) {
	ctx := context.Background()
	dsn := dbtest.SchemaURL(t, "bmsrv")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	key, err := apikey.NewStore(pool).Create(ctx, "metrics", false)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	cfg := Config{DatabaseURL: dsn, ShutdownTimeout: 5 * time.Second, MetricsAddr: mln.Addr().String()}
	go func() { done <- Serve(sctx, cfg, slog.New(slog.DiscardHandler), ln, mln) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	api, metrics := "http://"+ln.Addr().String(), "http://"+mln.Addr().String()+"/metrics"

	req, _ := http.NewRequest("POST", api+"/bookmarks", strings.NewReader(`{"url":"https://example.com/metrics"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /bookmarks: %d", resp.StatusCode)
	}
	// A worker (of no kind of the app's) only samples the stats table.
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{MaintenanceInterval: 100 * time.Millisecond,
		StatsInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	venturi.MustRegisterFunc(w, func(context.Context, sampleOnly, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)

	telemetrytest.AwaitScrape(t, metrics, 30*time.Second,
		`venturi_jobs_enqueued_total{action="inserted",kind="fetch_bookmark",queue="default"} 1`,
		`venturi_queue_depth{queue="default",state="available"} 1`,
		`venturi_queue_paused{queue="default"} 0`,
		`venturi_queue_oldest_available_age_seconds{queue="default"}`,
		"venturi_stats_sampled_timestamp_seconds ",
		"go_goroutines ", "process_resident_memory_bytes ", `target_info{service_name="bookmarks-api"`)
	if code, _ := telemetrytest.Get(t, api+"/metrics"); code != http.StatusUnauthorized && code != http.StatusNotFound {
		t.Errorf("the API's own listener answers GET /metrics with %d", code)
	}
}

// sampleOnly is a kind no job has.
type sampleOnly struct{}

func (sampleOnly) Kind() string { return "sample_only" }

// BOOKMARKS_METRICS_ADDR: unset is loopback, empty disables, a bad address is refused.
func TestMetricsAddrFromEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x")
	c, err := FromEnv()
	if err != nil || c.MetricsAddr != DefaultMetricsAddr {
		t.Fatalf("default: %q, %v", c.MetricsAddr, err)
	}
	t.Setenv("BOOKMARKS_METRICS_ADDR", "")
	if c, err = FromEnv(); err != nil || c.MetricsAddr != "" {
		t.Fatalf("empty: %q, %v", c.MetricsAddr, err)
	}
	t.Setenv("BOOKMARKS_METRICS_ADDR", "9464")
	if _, err = FromEnv(); err == nil || !strings.Contains(err.Error(), "BOOKMARKS_METRICS_ADDR") {
		t.Fatalf("bad address: %v", err)
	}
}
