// Package server runs the bookmarks API: configuration, the pgx pool, the HTTP server with
// its timeouts, and graceful shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/net/netutil"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/httpapi"
	"github.com/venturi-dev/bookmarks/shared/telemetry"
	"github.com/venturi-dev/venturi"
)

// Config is the API's configuration.
type Config struct {
	// DatabaseURL is the PostgreSQL URL (DATABASE_URL). Required.
	DatabaseURL string
	// Addr is the listen address (BOOKMARKS_API_ADDR, default 127.0.0.1:8080).
	Addr string
	// TagIndexDelay debounces tag-index rebuilds: one runs once edits are quiet this long, at most tasks.TagIndexMaxWait after a burst began (BOOKMARKS_TAG_INDEX_DELAY, default 2s).
	TagIndexDelay time.Duration
	// RefetchDelay throttles refetches: at most one fetch per bookmark per window (BOOKMARKS_REFETCH_DELAY, default 1s).
	RefetchDelay time.Duration
	// ShutdownTimeout bounds the graceful shutdown (default 15s).
	ShutdownTimeout time.Duration
	// WriteLimit is each API key's limit on the endpoints that change something
	// (BOOKMARKS_WRITE_RATE, default 10/s, and BOOKMARKS_WRITE_BURST, default 20).
	WriteLimit httpapi.RateLimit
	// ImportLimit is each API key's limit on POST /imports, on top of WriteLimit
	// (BOOKMARKS_IMPORT_RATE, default 1/m, and BOOKMARKS_IMPORT_BURST, default 3).
	ImportLimit httpapi.RateLimit
	// ImportConfirmAbove: imports of more items wait for a confirmation
	// (BOOKMARKS_IMPORT_CONFIRM_ABOVE: a positive integer, default 1000, or off, which is
	// httpapi.NoImportConfirmation).
	ImportConfirmAbove int
	// ImportConfirmTimeout is how long an import waits for its confirmation before it is
	// cancelled, and how long its confirmation link works
	// (BOOKMARKS_IMPORT_CONFIRM_TIMEOUT, default 24h).
	ImportConfirmTimeout time.Duration
	// PublicURL is the API's external address for the links it returns
	// (BOOKMARKS_API_PUBLIC_URL, such as https://bookmarks.example.com; default empty:
	// links are paths).
	PublicURL string
	// MetricsAddr is the listen address of the Prometheus endpoint GET /metrics, a server
	// of its own (BOOKMARKS_METRICS_ADDR, default DefaultMetricsAddr; set and empty
	// disables it). It is unauthenticated: keep it on loopback or on a network that only
	// the scraper reaches, never on a public address.
	MetricsAddr string
	// MaxConns bounds the API's open connections (BOOKMARKS_API_MAX_CONNS, default
	// DefaultMaxConns): past it, new connections wait in the kernel's accept queue until
	// one closes. The shed limit (256 requests in flight, answered 503) bounds the work;
	// this bounds the memory of connections (about 45 KiB each), which a burst of clients
	// or a slow-loris would otherwise grow without end (chaos/README.md, "Overload").
	MaxConns int
}

// DefaultMaxConns is the default of Config.MaxConns.
const DefaultMaxConns = 2048

// DefaultMetricsAddr is the default of Config.MetricsAddr: loopback only.
const DefaultMetricsAddr = "127.0.0.1:9464"

// ServiceName is the API's OpenTelemetry service.name.
const ServiceName = "bookmarks-api"

// FromEnv reads the configuration from the environment.
func FromEnv() (Config, error) {
	c := Config{DatabaseURL: os.Getenv("DATABASE_URL"), Addr: os.Getenv("BOOKMARKS_API_ADDR"), ShutdownTimeout: 15 * time.Second,
		MaxConns: DefaultMaxConns}
	if c.DatabaseURL == "" {
		return c, errors.New("DATABASE_URL is not set")
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	if v := os.Getenv("BOOKMARKS_TAG_INDEX_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return c, fmt.Errorf("BOOKMARKS_TAG_INDEX_DELAY: want a duration such as 2s, got %q", v)
		}
		c.TagIndexDelay = d
	}
	if v := os.Getenv("BOOKMARKS_REFETCH_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return c, fmt.Errorf("BOOKMARKS_REFETCH_DELAY: want a duration such as 1s, got %q", v)
		}
		c.RefetchDelay = d
	}
	c.ImportConfirmAbove, c.ImportConfirmTimeout = httpapi.DefaultImportConfirmAbove, httpapi.DefaultImportConfirmTimeout
	if v := os.Getenv("BOOKMARKS_IMPORT_CONFIRM_ABOVE"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case strings.EqualFold(v, "off"):
			c.ImportConfirmAbove = httpapi.NoImportConfirmation
		case err != nil || n < 1:
			return c, fmt.Errorf("BOOKMARKS_IMPORT_CONFIRM_ABOVE: want a positive number of items such as 1000, or off, got %q", v)
		default:
			c.ImportConfirmAbove = n
		}
	}
	if v := os.Getenv("BOOKMARKS_IMPORT_CONFIRM_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return c, fmt.Errorf("BOOKMARKS_IMPORT_CONFIRM_TIMEOUT: want a duration of at least 1s such as 24h, got %q", v)
		}
		c.ImportConfirmTimeout = d
	}
	if v := os.Getenv("BOOKMARKS_API_MAX_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			return c, fmt.Errorf("BOOKMARKS_API_MAX_CONNS: want a number of connections from 1 to 1000000 such as 2048, got %q", v)
		}
		c.MaxConns = n
	}
	if v := os.Getenv("BOOKMARKS_API_PUBLIC_URL"); v != "" {
		u, err := ParsePublicURL(v)
		if err != nil {
			return c, fmt.Errorf("BOOKMARKS_API_PUBLIC_URL: %w", err)
		}
		c.PublicURL = u
	}
	var err error
	if c.MetricsAddr, err = telemetry.MetricsAddr(os.LookupEnv, "BOOKMARKS_METRICS_ADDR", DefaultMetricsAddr); err != nil {
		return c, err
	}
	if c.WriteLimit, err = rateLimitFromEnv("BOOKMARKS_WRITE", httpapi.DefaultWriteLimit); err != nil {
		return c, err
	}
	if c.ImportLimit, err = rateLimitFromEnv("BOOKMARKS_IMPORT", httpapi.DefaultImportLimit); err != nil {
		return c, err
	}
	return c, nil
}

// rateLimitFromEnv reads <prefix>_RATE ("10/s", "600/m", "20/h", or "off") and
// <prefix>_BURST (a positive integer); unset ones keep def's values.
func rateLimitFromEnv(prefix string, def httpapi.RateLimit) (httpapi.RateLimit, error) {
	l := def
	if v := os.Getenv(prefix + "_RATE"); v != "" {
		r, err := ParseRate(v)
		if err != nil {
			return l, fmt.Errorf("%s_RATE: %w", prefix, err)
		}
		l.PerSecond = r
	}
	if v := os.Getenv(prefix + "_BURST"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return l, fmt.Errorf("%s_BURST: want a positive integer such as %d, got %q", prefix, def.Burst, v)
		}
		l.Burst = n
	}
	if l.Off() {
		return httpapi.Unlimited, nil
	}
	if err := l.Validate(); err != nil {
		return l, fmt.Errorf("%s_RATE/_BURST: %w", prefix, err)
	}
	return l, nil
}

// ParseRate parses a rate such as "10/s", "600/m" or "20/h" into requests per second;
// "off" is +Inf (no limit).
func ParseRate(s string) (float64, error) {
	if strings.EqualFold(s, "off") {
		return math.Inf(1), nil
	}
	n, unit, ok := strings.Cut(s, "/")
	per := map[string]float64{"s": 1, "m": 60, "h": 3600}[unit]
	count, err := strconv.ParseFloat(n, 64)
	if !ok || per == 0 || err != nil || !(count > 0) || math.IsInf(count, 0) {
		return 0, fmt.Errorf("want a rate such as 10/s, 600/m or 20/h (or off), got %q", s)
	}
	return count / per, nil
}

// ParsePublicURL checks the API's public address: an absolute http(s) URL with a host and
// at most a path prefix (no credentials, query or fragment). It returns it without a
// trailing slash.
func ParsePublicURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("want an http(s) URL such as https://bookmarks.example.com, got %q", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Run serves the API until ctx is cancelled, then shuts down gracefully: it stops
// accepting connections and lets in-flight requests finish within ShutdownTimeout. It
// listens on cfg.Addr, and on cfg.MetricsAddr unless that is empty.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	var metrics net.Listener
	if cfg.MetricsAddr != "" {
		if metrics, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			ln.Close()
			return fmt.Errorf("BOOKMARKS_METRICS_ADDR: %w", err)
		}
	}
	return Serve(ctx, cfg, log, ln, metrics)
}

// Serve is Run on listeners the caller opened: ln for the API, metrics for GET /metrics
// (nil: no metrics endpoint). It closes both. Traces are exported when
// OTEL_EXPORTER_OTLP_ENDPOINT is set (package telemetry).
func Serve(ctx context.Context, cfg Config, log *slog.Logger, ln, metrics net.Listener) (err error) {
	closeAll := func() {
		ln.Close()
		if metrics != nil {
			metrics.Close()
		}
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		closeAll()
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	tel, err := telemetry.New(ctx, ServiceName, os.Getenv, log)
	if err != nil {
		closeAll()
		return err
	}
	defer func() { // last: flush the spans of the requests that shutdown let finish
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, tel.Shutdown(sctx))
	}()
	// The API's queue gauges come from venturi's stats table (one small read per scrape
	// at most, cached for a second), never from counting jobs.
	stats, err := tel.Venturi.ObserveStats(venturi.NewQueue(pool, venturi.QueueConfig{}))
	if err != nil {
		closeAll()
		return err
	}
	defer stats.Unregister()
	if metrics != nil {
		ms := tel.ServeMetrics(metrics, log)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = errors.Join(err, ms.Shutdown(sctx))
		}()
	}
	e := httpapi.New(pool, log, httpapi.Config{TagIndexDelay: cfg.TagIndexDelay, RefetchDelay: cfg.RefetchDelay,
		WriteLimit: cfg.WriteLimit, ImportLimit: cfg.ImportLimit, ImportConfirmAbove: cfg.ImportConfirmAbove,
		ImportConfirmTimeout: cfg.ImportConfirmTimeout, PublicURL: cfg.PublicURL,
		TracerProvider: tel.TracerProvider, Propagator: tel.Propagator,
		QueueMiddleware: []venturi.EnqueueMiddleware{tel.Venturi.Enqueue}})
	srv := &http.Server{
		Handler:           e,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("bookmarks-api listening", "addr", ln.Addr().String(), "tracing", tel.Tracing)
	errc := make(chan error, 1)
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	go func() { errc <- srv.Serve(netutil.LimitListener(ln, maxConns)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("bookmarks-api shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("bookmarks-api stopped")
	return nil
}
