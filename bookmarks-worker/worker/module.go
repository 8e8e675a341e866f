// Package worker assembles the bookmarks worker from fx modules: configuration, the pgx
// pool, OpenTelemetry with its metrics endpoint, the App state with its fetcher, the
// handlers (through the "venturi.handlers" value group) and the venturi worker, started on
// OnStart and stopped gracefully on OnStop.
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/config"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/handlers"
	"github.com/venturi-dev/bookmarks/shared/telemetry"
	"github.com/venturi-dev/venturi"
)

// Module is the whole worker. It needs a *slog.Logger (see [Options]).
var Module = fx.Module("worker",
	config.Module,
	fx.Invoke(WarnTestOnlySettings), // first: before anything else is logged
	fx.Provide(NewPool, NewTelemetry, NewMetricsEndpoint, NewVenturiWorker),
	handlers.Module,
	fx.Invoke(func(*MetricsEndpoint) {}),
	fx.Invoke(func(*handlers.Worker) {}), // the worker is the point of the app
)

// TestOnlyWarning is the message of the warning [WarnTestOnlySettings] logs.
const TestOnlyWarning = "WARNING: TEST-ONLY SETTINGS ACTIVE: the fetcher may reach addresses it refuses in production. Never run this worker in production with them."

// WarnTestOnlySettings logs TestOnlyWarning at level WARN, naming each active test-only
// setting (config.Config.TestOnlySettings), when any is active; otherwise nothing. The
// worker runs it before it logs anything else, so the warning heads its log.
func WarnTestOnlySettings(cfg config.Config, log *slog.Logger) {
	if s := cfg.TestOnlySettings(); len(s) > 0 {
		log.Warn(TestOnlyWarning, "test_only_settings", s)
	}
}

// Options returns everything main needs: the Module, a JSON logger on stderr, fx's own
// events through that logger, and a stop timeout that covers the shutdown grace.
func Options() fx.Option {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("service", "bookmarks-worker")
	stop := StopTimeout(config.Config{ShutdownGrace: 10 * time.Second, Lease: 30 * time.Second})
	if cfg, err := config.FromEnv(); err == nil {
		stop = StopTimeout(cfg)
	}
	return fx.Options(
		Module,
		fx.Supply(log),
		fx.WithLogger(func() fxevent.Logger {
			// fx's start-up events (every provide and invoke, with stack frames) at debug level:
			// the log starts with what the worker does; fx's errors stay errors.
			l := &fxevent.SlogLogger{Logger: log}
			l.UseLogLevel(slog.LevelDebug)
			return l
		}),
		fx.StopTimeout(stop),
	)
}

// StopTimeout is fx's stop timeout for cfg: venturi's Worker.Stop waits ShutdownGrace
// for running jobs, then up to min(5s, Lease/2) for handlers that ignore cancellation,
// then writes the last results; 5s covers those writes and the pool's close. Past it,
// Stop returns anyway and the unfinished jobs come back when their leases expire.
func StopTimeout(cfg config.Config) time.Duration {
	return cfg.ShutdownGrace + min(5*time.Second, cfg.Lease/2) + 5*time.Second
}

// NewPool opens the pgx pool, checks it on start and closes it on stop.
func NewPool(lc fx.Lifecycle, cfg config.Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pc.MaxConns = int32(cfg.Concurrency + cfg.ImportConcurrency + 4)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error { return pool.Ping(ctx) },
		OnStop: func(ctx context.Context) error {
			// Close waits for every connection to be returned; a handler that ignored its
			// cancellation may still hold one. Keep the stop timeout: the process exits.
			closed := make(chan struct{})
			go func() { pool.Close(); close(closed) }()
			select {
			case <-closed:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("close database pool: %w", ctx.Err())
			}
		},
	})
	return pool, nil
}

// WorkerParams are the venturi worker's dependencies.
type WorkerParams struct {
	fx.In
	Lifecycle     fx.Lifecycle
	Config        config.Config
	Pool          *pgxpool.Pool
	App           *handlers.App
	Log           *slog.Logger
	Telemetry     *telemetry.Telemetry
	Registrations []handlers.Registration `group:"venturi.handlers"`
}

// NewVenturiWorker builds the venturi worker, registers every handler of the group, and
// hooks it to the lifecycle: Start returns at once (the worker runs in the background) and
// Stop waits for running jobs up to the shutdown grace. The worker serves the default
// queue with Config.Concurrency handlers and the imports queue with
// Config.ImportConcurrency (handlers.Queues).
func NewVenturiWorker(p WorkerParams) (*handlers.Worker, error) {
	w, err := venturi.NewWorker(p.Pool, p.App, venturi.Config{
		Concurrency:   p.Config.Concurrency, // the default for what Queues does not set
		Queues:        handlers.Queues(p.Config.Concurrency, p.Config.ImportConcurrency),
		Lease:         p.Config.Lease,
		ShutdownGrace: p.Config.ShutdownGrace,
		PollInterval:  p.Config.PollInterval,
		Backoff:       venturi.Backoff{Base: p.Config.BackoffBase},
		Logger:        p.Log,
		// A span per run, linked to the enqueue's; run counters and histograms.
		Middleware: []venturi.WorkMiddleware{p.Telemetry.Venturi.Work},
	})
	if err != nil {
		return nil, err
	}
	for _, reg := range p.Registrations {
		if err := reg(w); err != nil {
			return nil, err
		}
	}
	// One log line per task kind per minute with its runs' events (a subscriber that
	// never slows the worker: see venturi.Subscription).
	sub := w.Subscribe(venturi.SubscribeConfig{Buffer: 4096})
	sumCtx, stopSum := context.WithCancel(context.Background())
	sumDone := make(chan struct{})
	p.Lifecycle.Append(fx.Hook{
		// The daily refetch's schedule is registered first, from every replica (safe: an
		// unchanged definition changes nothing); a registration that fails fails the start
		// before the worker runs.
		OnStart: func(ctx context.Context) error {
			if err := handlers.RegisterRefetchSchedule(ctx, p.App.Queue, p.App.Refetch); err != nil {
				return err
			}
			go func() { defer close(sumDone); summarizeEvents(sumCtx, sub, time.Minute, p.Log) }()
			return w.Start(ctx)
		},
		OnStop: func(ctx context.Context) error {
			err := w.Stop(ctx)
			stopSum()
			sub.Close()
			<-sumDone
			return err
		},
	})
	return w, nil
}
