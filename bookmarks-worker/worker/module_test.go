package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/venturi-dev/bookmarks/bookmarks-worker/internal/handlers"
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
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		t.Fatal("TEST_DATABASE_URL is not set: run `make test/app`")
	}
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "bmfx_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	cfg, _ := pgxpool.ParseConfig(u.String())
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pool.Close()

	t.Setenv("DATABASE_URL", u.String())
	var w *handlers.Worker
	app := fxtest.New(t, Module, fx.Supply(slog.New(slog.NewTextHandler(io.Discard, nil))), fx.Populate(&w))
	app.RequireStart()
	if w == nil || w.ID() == "" {
		t.Fatal("no worker")
	}
	app.RequireStop()
}
