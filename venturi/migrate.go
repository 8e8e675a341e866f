package venturi

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migration/*.up.sql
var migrations embed.FS

// MigrationsFS returns venturi's migrations (migration/NNN_name.up.sql), for teams that
// apply them with their own migration tool instead of [Migrate].
func MigrationsFS() fs.FS {
	sub, _ := fs.Sub(migrations, "migration")
	return sub
}

// migrationLockKey is the advisory lock that serializes migrators ("venturi" in ASCII).
const migrationLockKey = 0x76656e74757269

// Migration is one schema version.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists venturi's migrations in order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations, "migration")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".up.sql")
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("venturi: migration %s: name must start with a number", e.Name())
		}
		b, err := migrations.ReadFile(path.Join("migration", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies venturi's pending migrations to the pool's schema (its search_path) and
// returns the versions it applied. Each migration runs in its own transaction under an
// advisory lock, so replicas that start together are safe: one applies, the others wait
// and then find nothing to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	all, err := Migrations()
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range all {
		done, err := migrateOne(ctx, pool, m)
		if err != nil {
			return applied, fmt.Errorf("venturi: migration %s: %w", m.Name, err)
		}
		if done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

func migrateOne(ctx context.Context, pool *pgxpool.Pool, m Migration) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Bookkeeping, not queue SQL: the version table must exist before any migration.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLockKey)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS venturi_migration (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM venturi_migration WHERE version = $1)`, m.Version).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO venturi_migration (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return err
		}
		done = true
		return nil
	})
	return done, err
}
