package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

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
