package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/config"
	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/handlers"
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
	var w *handlers.Worker
	app := fxtest.New(t, Module, fx.Supply(slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&w))
	app.RequireStart()
	if w == nil || w.ID() == "" {
		t.Fatal("no worker")
	}
	app.RequireStop()
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
