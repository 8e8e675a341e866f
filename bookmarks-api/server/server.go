// Package server runs the bookmarks API: configuration, the pgx pool, the HTTP server with
// its timeouts, and graceful shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/httpapi"
)

// Config is the API's configuration.
type Config struct {
	// DatabaseURL is the PostgreSQL URL (DATABASE_URL). Required.
	DatabaseURL string
	// Addr is the listen address (BOOKMARKS_API_ADDR, default 127.0.0.1:8080).
	Addr string
	// TagIndexDelay delays tag-index rebuilds so bursts merge (BOOKMARKS_TAG_INDEX_DELAY, default 2s).
	TagIndexDelay time.Duration
	// RefetchDelay debounces refetch bursts (BOOKMARKS_REFETCH_DELAY, default 1s).
	RefetchDelay time.Duration
	// ShutdownTimeout bounds the graceful shutdown (default 15s).
	ShutdownTimeout time.Duration
}

// FromEnv reads the configuration from the environment.
func FromEnv() (Config, error) {
	c := Config{DatabaseURL: os.Getenv("DATABASE_URL"), Addr: os.Getenv("BOOKMARKS_API_ADDR"), ShutdownTimeout: 15 * time.Second}
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
	return c, nil
}

// Run serves the API until ctx is cancelled, then shuts down gracefully: it stops
// accepting connections and lets in-flight requests finish within ShutdownTimeout.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	e := httpapi.New(pool, log, httpapi.Config{TagIndexDelay: cfg.TagIndexDelay, RefetchDelay: cfg.RefetchDelay})
	srv := &http.Server{
		Handler:           e,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	log.Info("bookmarks-api listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
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
