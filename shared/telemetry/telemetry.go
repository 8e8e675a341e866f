// Package telemetry sets up the bookmarks services' OpenTelemetry: Prometheus metrics
// (venturi's, the Go runtime's and the process's) for a /metrics endpoint on a listener of
// its own, traces exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set and not exported otherwise, the W3C trace
// context and baggage propagator, and venturi's instrumentation (package venturiotel) on
// all of them. The API and the worker share it.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/venturi-dev/venturi/venturiotel"
)

// Telemetry is one service's OpenTelemetry setup.
type Telemetry struct {
	// Venturi is venturi's middleware (Enqueue, Work) and gauges (ObserveStats) on the
	// providers below.
	Venturi *venturiotel.Instrumentation
	// TracerProvider exports over OTLP/HTTP when an OTLP endpoint is configured;
	// otherwise it is a no-op provider (spans cost nothing and go nowhere).
	TracerProvider trace.TracerProvider
	// Propagator reads and writes W3C trace context and baggage (HTTP headers, job
	// metadata).
	Propagator propagation.TextMapPropagator
	// MeterProvider feeds the Prometheus registry that [Telemetry.Handler] serves.
	MeterProvider metric.MeterProvider
	// Tracing reports whether spans are exported (an OTLP endpoint is configured).
	Tracing bool

	registry *prometheus.Registry
	shutdown []func(context.Context) error
}

// New sets up the telemetry of the service named service (its service.name, unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise). getenv reads the
// environment (os.Getenv); the OTLP exporter reads its standard OTEL_EXPORTER_OTLP_*
// variables itself. OpenTelemetry's errors (a failed export, a failed read of the stats
// table for the gauges) are logged to log at WARN: New sets the otel error handler, a
// process-wide setting. Shutdown flushes and stops what New started.
func New(ctx context.Context, service string, getenv func(string) string, log *slog.Logger) (*Telemetry, error) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", service)), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	t := &Telemetry{registry: prometheus.NewRegistry(),
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(t.registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	t.MeterProvider, t.shutdown = mp, append(t.shutdown, mp.Shutdown)

	t.TracerProvider = noop.NewTracerProvider()
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		spans, err := otlptracehttp.New(ctx)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
		t.TracerProvider, t.Tracing, t.shutdown = tp, true, append(t.shutdown, tp.Shutdown)
	}
	t.Venturi, err = venturiotel.New(venturiotel.Config{MeterProvider: t.MeterProvider,
		TracerProvider: t.TracerProvider, Propagator: t.Propagator})
	if err != nil {
		_ = t.Shutdown(ctx)
		return nil, err
	}
	return t, nil
}

// Shutdown flushes the spans not yet exported and stops the providers, within ctx.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		errs = append(errs, t.shutdown[i](ctx))
	}
	t.shutdown = nil
	return errors.Join(errs...)
}

// Handler serves the metrics in the Prometheus text format: venturi's (venturi_*), the Go
// runtime's (go_*), the process's (process_*) and target_info (the resource). At most 4
// scrapes are served at once, each within 10s.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second})
}

// MetricsPath is the path of the metrics endpoint.
const MetricsPath = "/metrics"

// MetricsServer serves [Telemetry.Handler] at MetricsPath on a listener of its own. It
// is unauthenticated: listen on loopback (the default) or on a network that only the
// scraper reaches, never on a public address.
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// ServeMetrics serves the metrics on ln until Shutdown. It logs the address, with a
// warning when it is not a loopback address.
func (t *Telemetry) ServeMetrics(ln net.Listener, log *slog.Logger) *MetricsServer {
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, t.Handler())
	m := &MetricsServer{ln: ln, done: make(chan error, 1), srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	addr := ln.Addr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil && !isLoopback(host) {
		log.Warn("metrics endpoint on a non-loopback address: it is unauthenticated, keep it off public networks", "addr", addr)
	} else {
		log.Info("metrics listening", "addr", addr, "path", MetricsPath)
	}
	go func() { m.done <- m.srv.Serve(ln) }()
	return m
}

// Addr is the address the metrics are served on.
func (m *MetricsServer) Addr() net.Addr { return m.ln.Addr() }

// Shutdown stops the server, letting scrapes in flight finish within ctx.
func (m *MetricsServer) Shutdown(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	if serr := <-m.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// isLoopback reports whether host (an IP address or a name) is a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// MetricsAddr reads a metrics listen address from the environment variable key with
// lookup (os.LookupEnv): unset is def, set and empty disables the endpoint (""), anything
// else must be host:port with a numeric port (":9464" listens on every interface).
func MetricsAddr(lookup func(string) (string, bool), key, def string) (string, error) {
	v, ok := lookup(key)
	if !ok {
		return def, nil
	}
	if v == "" {
		return "", nil
	}
	_, port, err := net.SplitHostPort(v)
	if _, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil {
		return "", fmt.Errorf("%s: want host:port such as %s, or empty to disable the metrics endpoint, got %q", key, def, v)
	}
	return v, nil
}
