// Package migrations holds the bookmarks application's schema (NNN_name.up.sql, read by
// sqlc too) and applies it, after venturi's own migrations, with [Migrate].
package migrations

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

//go:embed *.up.sql
var files embed.FS

// All returns the application's migrations in version order.
func All() ([]venturi.Migration, error) { return venturi.ReadMigrations(files) }

// Result says what Migrate applied.
type Result struct {
	Venturi []int // venturi's versions applied by this call
	App     []int // the application's versions applied by this call
}

// Migrate applies venturi's pending migrations and then the application's, to the pool's
// schema (its search_path), with venturi's migrator: each migration in its own
// transaction under an advisory lock, versions recorded in bookmarks_migration, so
// replicas that start together are safe.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (Result, error) {
	var res Result
	var err error
	if res.Venturi, err = venturi.Migrate(ctx, pool); err != nil {
		return res, err
	}
	res.App, err = venturi.MigrateFS(ctx, pool, files, "bookmarks_migration")
	return res, err
}
