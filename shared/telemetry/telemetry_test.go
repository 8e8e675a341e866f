package telemetry

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/venturi-dev/bookmarks/shared/telemetry/telemetrytest"
)

// Without an OTLP endpoint nothing is exported and spans are no-ops; the metrics server
// serves the Go and process metrics and the resource at /metrics, and nothing else.
func TestMetricsServerWithoutTracing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tel, err := New(ctx, "telemetry-test", func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	if tel.Tracing {
		t.Fatal("tracing without an endpoint")
	}
	_, span := tel.TracerProvider.Tracer("t").Start(ctx, "x")
	if span.SpanContext().IsValid() || span.IsRecording() {
		t.Error("a span without an exporter is recorded")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := tel.ServeMetrics(ln, slog.New(slog.DiscardHandler))
	base := "http://" + m.Addr().String()
	code, body := telemetrytest.Get(t, base+MetricsPath)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{"go_goroutines ", "process_cpu_seconds_total ", `target_info{service_name="telemetry-test"`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if code, _ := telemetrytest.Get(t, base+"/"); code != http.StatusNotFound {
		t.Errorf("GET /: %d, want 404", code)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, spans go over OTLP/HTTP to it (here a local
// receiver): Shutdown flushes them.
func TestSpansExportedOverOTLPHTTP(t *testing.T) {
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // read by the exporter too
	ctx := context.Background()
	tel, err := New(ctx, "telemetry-test", func(k string) string {
		if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			return collector.URL
		}
		return ""
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing {
		t.Fatal("no tracing with an endpoint")
	}
	_, span := tel.TracerProvider.Tracer("t").Start(ctx, "x")
	span.End()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no span reached the OTLP endpoint")
	}
}

func TestMetricsAddr(t *testing.T) {
	t.Parallel()
	lookup := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, c := range []struct {
		env  map[string]string
		want string
		bad  bool
	}{
		{map[string]string{}, "127.0.0.1:9464", false},
		{map[string]string{"M": ""}, "", false},
		{map[string]string{"M": "0.0.0.0:9999"}, "0.0.0.0:9999", false},
		{map[string]string{"M": ":9464"}, ":9464", false},
		{map[string]string{"M": "9464"}, "", true},
		{map[string]string{"M": "localhost:http"}, "", true},
		{map[string]string{"M": "127.0.0.1:70000"}, "", true},
	} {
		got, err := MetricsAddr(lookup(c.env), "M", "127.0.0.1:9464")
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("MetricsAddr(%v) = %q, %v; want %q (error %v)", c.env, got, err, c.want, c.bad)
		}
		if err != nil && !strings.Contains(err.Error(), "M:") {
			t.Errorf("error %q does not name the variable", err)
		}
	}
}
