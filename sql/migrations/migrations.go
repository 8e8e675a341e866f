// Package migrations holds the bookmarks application's schema (NNN_name.up.sql, read by
// sqlc too) and applies it, after venturi's own migrations, with [Migrate].
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

//go:embed *.up.sql
var files embed.FS

// lockKey serializes concurrent migrators of the application schema ("bookmark" in ASCII).
const lockKey = 0x626f6f6b6d61726b

// Migration is one version of the application schema.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the application's migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".up.sql")
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: the name must start with a number", e.Name())
		}
		b, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// Result says what Migrate applied.
type Result struct {
	Venturi []int // venturi's versions applied by this call
	App     []int // the application's versions applied by this call
}

// Migrate applies venturi's pending migrations and then the application's, to the pool's
// schema (its search_path). Each migration runs in its own transaction under an advisory
// lock, with its version recorded in bookmarks_migration, so replicas that start together
// are safe: one applies, the others wait and then find nothing to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool) (Result, error) {
	var res Result
	var err error
	if res.Venturi, err = venturi.Migrate(ctx, pool); err != nil {
		return res, err
	}
	all, err := All()
	if err != nil {
		return res, err
	}
	for _, m := range all {
		done, err := apply(ctx, pool, m)
		if err != nil {
			return res, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if done {
			res.App = append(res.App, m.Version)
		}
	}
	return res, nil
}

func apply(ctx context.Context, pool *pgxpool.Pool, m Migration) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(lockKey)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS bookmarks_migration (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM bookmarks_migration WHERE version = $1)`, m.Version).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO bookmarks_migration (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return err
		}
		done = true
		return nil
	})
	return done, err
}
