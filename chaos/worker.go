package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// workerMain is `chaos worker`: an ordinary venturi.Worker with the scripted handlers.
// The driver passes the connection string (with search_path and application_name) in
// CHAOS_DSN.
func workerMain(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	slot := fs.Int("n", 0, "worker slot number (for application_name and start rows)")
	lease := fs.Duration("lease", 2*time.Second, "venturi lease")
	concurrency := fs.Int("concurrency", 8, "concurrent handlers")
	pollOnly := fs.Bool("poll-only", false, "no LISTEN (behind PgBouncer in transaction mode)")
	ledgerFile := fs.String("ledger", "", "append each acknowledged completion and pause to this file (ledger.go)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dsn := os.Getenv("CHAOS_DSN")
	if dsn == "" {
		return fmt.Errorf("CHAOS_DSN is not set (the worker is started by `chaos run`)")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Never outlive the driver: if the parent goes away, exit at once.
	ppid := os.Getppid()
	go func() {
		for range time.Tick(500 * time.Millisecond) {
			if os.Getppid() != ppid {
				log.Error("chaos worker: driver is gone; exiting")
				os.Exit(3)
			}
		}
	}()

	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	// A step's body writes its execution row on a second connection while its
	// transaction is open: up to two connections per handler.
	cfg.MaxConns = int32(2*(*concurrency+limitedQueueHandlers) + 2)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var pool *pgxpool.Pool
	for { // the database may be restarting right now
		pool, err = pgxpool.NewWithConfig(cctx, cfg)
		if err == nil {
			if err = pool.Ping(cctx); err == nil {
				break
			}
			pool.Close()
		}
		if cctx.Err() != nil {
			return fmt.Errorf("connect: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer pool.Close()

	led, err := openLedger(*ledgerFile)
	if err != nil {
		return err
	}
	app := App{Pool: pool, Worker: *slot, PID: os.Getpid(), Ledger: led, Queue: venturi.NewQueue(pool, venturi.QueueConfig{})}
	// The default queue, and limitedQueue with a few handlers: more across the workers
	// than the queue's limit, so that the limit binds.
	queues := []venturi.WorkerQueue{{Name: venturi.DefaultQueue}, {Name: limitedQueue, Concurrency: limitedQueueHandlers}}
	w, err := venturi.NewWorker(pool, app, venturi.Config{
		Concurrency:         *concurrency,
		Queues:              queues,
		Lease:               *lease,
		MaintenanceInterval: 250 * time.Millisecond,
		PollInterval:        500 * time.Millisecond,
		PollOnly:            *pollOnly,
		ShutdownGrace:       3 * time.Second,
		Backoff:             venturi.Backoff{Base: 100 * time.Millisecond, Cap: 2 * time.Second},
		Logger:              log,
		ID:                  fmt.Sprintf("chaos-worker-%d-pid%d", *slot, os.Getpid()),
	})
	if err != nil {
		return err
	}
	venturi.MustRegister[Job](w)
	venturi.MustRegister[Dedup](w)
	venturi.MustRegister[SQLMerge](w)   // sqlproducer.go
	venturi.MustRegister[SQLReplace](w) // sqlproducer.go
	venturi.MustRegister[Slotted](w)
	venturi.MustRegister[Capped](w)
	venturi.MustRegister[Rated](w)
	venturi.MustRegister[Queued](w)
	venturi.MustRegister[Stepped](w)
	venturi.MustRegister[Waiter](w)
	venturi.MustRegister[WfTask](w)     // tasks_wf.go
	venturi.MustRegister[WfCallback](w) // tasks_wf.go
	venturi.MustRegisterChunks(w, venturi.ChunkConfig[ChunkJob]{Size: chunkSize, Linger: chunkLinger,
		Key: func(j ChunkJob) string { return j.Part }}, handleChunk)
	venturi.MustRegister[SingletonService](w) // singleton.go
	venturi.MustRegister[CronTick](w)         // cron.go
	for {                                     // Start pings the database; retry while it restarts
		err = w.Start(ctx)
		if err == nil {
			break
		}
		if cctx.Err() != nil {
			return fmt.Errorf("start: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Every worker registers the cron schedule at every start, as a service would
	// (cron.go); an unchanged definition changes nothing.
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	if err := registerCron(rctx, venturi.NewQueue(pool, venturi.QueueConfig{})); err != nil {
		log.Error("chaos worker: registering the cron schedule failed", "err", err)
	}
	rcancel()
	// The retention schema's worker (wfdriver.go), when the driver runs one in this slot.
	var rw *venturi.Worker[App]
	if rdsn := os.Getenv("CHAOS_DSN_RETAIN"); rdsn != "" {
		var rpool *pgxpool.Pool
		if rw, rpool, err = startRetainWorker(ctx, rdsn, *slot, *lease, log); err != nil {
			return err
		}
		defer rpool.Close()
	}
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer scancel()
	if rw != nil {
		_ = rw.Stop(sctx)
	}
	return w.Stop(sctx)
}

// startRetainWorker starts a second worker, on the retention schema (its connection
// string's search_path): workflow members only, and completed jobs kept retainCompleted,
// so that members are pruned while their workflows run (wfdriver.go).
func startRetainWorker(ctx context.Context, dsn string, slot int, lease time.Duration, log *slog.Logger) (*venturi.Worker[App], *pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = 2*retainConcurrency + 2
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var pool *pgxpool.Pool
	for {
		pool, err = pgxpool.NewWithConfig(cctx, cfg)
		if err == nil {
			if err = pool.Ping(cctx); err == nil {
				break
			}
			pool.Close()
		}
		if cctx.Err() != nil {
			return nil, nil, fmt.Errorf("connect (retention schema): %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	app := App{Pool: pool, Worker: slot, PID: os.Getpid(), Queue: venturi.NewQueue(pool, venturi.QueueConfig{}), Retain: true}
	w, err := venturi.NewWorker(pool, app, venturi.Config{
		Concurrency:         retainConcurrency,
		Lease:               lease,
		MaintenanceInterval: 250 * time.Millisecond,
		PollInterval:        500 * time.Millisecond,
		ShutdownGrace:       3 * time.Second,
		Backoff:             venturi.Backoff{Base: 100 * time.Millisecond, Cap: 2 * time.Second},
		RetainCompleted:     retainCompleted,
		Logger:              log,
		ID:                  fmt.Sprintf("chaos-worker-%d-pid%d", app.Worker, os.Getpid()),
	})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	venturi.MustRegister[WfTask](w)
	venturi.MustRegister[WfCallback](w)
	for {
		err = w.Start(ctx)
		if err == nil {
			return w, pool, nil
		}
		if cctx.Err() != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("start (retention schema): %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
