package venturiotel_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/baggage"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
	"github.com/venturi-dev/venturi/venturiotel"
)

// within bounds every wait for a condition: generous, for a loaded two-core machine.
const within = 30 * time.Second

// otelTask ends its runs as Do says: complete, fail_once (fails its first run), fail
// (always), permanent, panic.
type otelTask struct {
	Do  string `json:"do"`
	Key string `json:"key,omitempty"`
}

func (otelTask) Kind() string { return "otel_task" }

// DedupKey merges enqueues of the same Key into the pending job (default: replace).
func (t otelTask) DedupKey() venturi.DedupKey { return venturi.DedupKey(t.Key) }

func (t otelTask) Handle(ctx context.Context, run *venturi.Run[struct{}], seen *seenBaggage) (venturi.Outcome, error) {
	seen.record(ctx)
	switch {
	case t.Do == "fail_once" && run.RunCount() == 1, t.Do == "fail":
		return venturi.Outcome{}, venturi.RetryIn(time.Millisecond, errors.New("try again"))
	case t.Do == "permanent":
		return venturi.Outcome{}, venturi.Permanentf("never")
	case t.Do == "panic":
		panic("boom")
	}
	return venturi.Completed(), nil
}

// newDB returns a pool on a fresh, migrated schema.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 10)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool
}

// telemetry is an SDK tracer provider recording in memory, a manual metric reader, and the
// Instrumentation on both.
type telemetry struct {
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	tel    *venturiotel.Instrumentation
}

func newTelemetry(t *testing.T, cfg venturiotel.Config) *telemetry {
	t.Helper()
	x := &telemetry{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	x.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(x.spans))
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(x.reader))
	}
	cfg.TracerProvider = x.tp
	tel, err := venturiotel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	x.tel = tel
	return x
}

// collect reads the metrics.
func (x *telemetry) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := x.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// span returns the only ended span named name.
func (x *telemetry) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range x.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1 (all: %v)", len(found), name, x.names())
	}
	return found[0]
}

func (x *telemetry) names() []string {
	var n []string
	for _, s := range x.spans.GetSpans() {
		n = append(n, s.Name)
	}
	return n
}

// startWorker starts a worker of otelTask with the instrumentation's work middleware and
// stops it when the test ends.
func startWorker(t *testing.T, pool *pgxpool.Pool, tel *venturiotel.Instrumentation, seen *seenBaggage, maxFailures int) {
	t.Helper()
	w, err := venturi.NewWorker(pool, seen, venturi.Config{
		Concurrency: 4, PollInterval: 20 * time.Millisecond, MaintenanceInterval: 100 * time.Millisecond, StatsInterval: 100 * time.Millisecond,
		MaxFailures: maxFailures, Logger: testLogger(),
		Middleware: []venturi.WorkMiddleware{tel.Work},
	})
	if err != nil {
		t.Fatal(err)
	}
	venturi.MustRegister[otelTask](w)
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

func testLogger() *slog.Logger {
	if os.Getenv("VENTURI_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// awaitState polls the job until it is in state, or fails after within.
func awaitState(q *venturi.Queue, id ulid.ULID, state venturi.State) (*venturi.Job, error) {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(5 * time.Millisecond) // the polling interval
	defer tick.Stop()
	for ; ; <-tick.C {
		j, err := q.Job(context.Background(), id)
		if err != nil {
			return nil, err
		}
		if j.State == state {
			return j, nil
		}
		if time.Now().After(deadline) {
			return j, fmt.Errorf("job %s is %s after %v, want %s", id, j.State, within, state)
		}
	}
}

func waitState(t *testing.T, q *venturi.Queue, id ulid.ULID, state venturi.State) *venturi.Job {
	t.Helper()
	j, err := awaitState(q, id, state)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// seenBaggage records the baggage member "tenant" of each handler's context.
type seenBaggage struct {
	mu      sync.Mutex
	tenants []string
}

// exampleDB is newDB for examples.
func exampleDB() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	pool, cleanup, err := testdb.Open(ctx, 10)
	if err != nil {
		log.Fatalf("venturiotel examples need PostgreSQL: %v", err)
	}
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		cleanup()
		log.Fatalf("migrate: %v", err)
	}
	return pool, cleanup
}

func (s *seenBaggage) record(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tenants = append(s.tenants, baggage.FromContext(ctx).Member("tenant").Value())
}

func (s *seenBaggage) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.tenants)
}

// awaitSample polls Queue.Stats until cond holds for a sample, or fails after within.
func awaitSample(t *testing.T, q *venturi.Queue, cond func(venturi.Stats) bool) venturi.Stats {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond) // the polling interval
	defer tick.Stop()
	for ; ; <-tick.C {
		s, err := q.Stats(context.Background())
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		if !s.SampledAt.IsZero() && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stats sample as wanted after %v; the last: %+v", within, s)
		}
	}
}
