package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"go.uber.org/fx"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/config"
	"github.com/venturi-dev/bookmarks/shared/telemetry"
)

// ServiceName is the worker's OpenTelemetry service.name.
const ServiceName = "bookmarks-worker"

// NewTelemetry sets up the worker's OpenTelemetry (package telemetry: Prometheus metrics,
// OTLP traces when OTEL_EXPORTER_OTLP_ENDPOINT is set) and flushes it on stop. It is
// constructed before the venturi worker, which uses it, so fx stops it after the worker:
// the spans of the last runs are flushed.
func NewTelemetry(lc fx.Lifecycle, log *slog.Logger) (*telemetry.Telemetry, error) {
	tel, err := telemetry.New(context.Background(), ServiceName, os.Getenv, log)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStop: tel.Shutdown})
	return tel, nil
}

// MetricsEndpoint is the worker's GET /metrics server: venturi's series (its runs, its
// enqueues; the queue gauges are the API's), the Go runtime's and the process's. It
// listens on Config.MetricsAddr from start to stop, unless that is empty.
type MetricsEndpoint struct {
	srv *telemetry.MetricsServer
}

// Addr is the address the endpoint listens on; nil before start or when disabled.
func (m *MetricsEndpoint) Addr() net.Addr {
	if m.srv == nil {
		return nil
	}
	return m.srv.Addr()
}

// NewMetricsEndpoint hooks the metrics server to the lifecycle: a start whose address
// cannot be listened on fails, naming BOOKMARKS_WORKER_METRICS_ADDR.
func NewMetricsEndpoint(lc fx.Lifecycle, cfg config.Config, tel *telemetry.Telemetry, log *slog.Logger) *MetricsEndpoint {
	m := &MetricsEndpoint{}
	if cfg.MetricsAddr == "" {
		return m
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", cfg.MetricsAddr)
			if err != nil {
				return fmt.Errorf("BOOKMARKS_WORKER_METRICS_ADDR: %w", err)
			}
			m.srv = tel.ServeMetrics(ln, log)
			return nil
		},
		OnStop: func(ctx context.Context) error { return m.srv.Shutdown(ctx) },
	})
	return m
}
