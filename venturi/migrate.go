package venturi

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
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

// Migration is one schema version, read from a file named NNN_name.up.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists venturi's migrations in order.
func Migrations() ([]Migration, error) { return ReadMigrations(MigrationsFS()) }

// ReadMigrations reads the NNN_name.up.sql files at the root of fsys, in version order.
func ReadMigrations(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.Glob(fsys, "*.up.sql")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, file := range entries {
		name := strings.TrimSuffix(file, ".up.sql")
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("venturi: migration %s: name must start with a number", file)
		}
		b, err := fs.ReadFile(fsys, file)
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
	return MigrateFS(ctx, pool, MigrationsFS(), "venturi_migration")
}

// MigrateFS applies the migrations in fsys (see [ReadMigrations]) the way [Migrate]
// applies venturi's, recording versions in table (created when missing), so a service can
// migrate its own schema with the same guarantees. The advisory lock is derived from the
// schema and table name: migrators of different tables do not wait for each other.
func MigrateFS(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, table string) ([]int, error) {
	all, err := ReadMigrations(fsys)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range all {
		done, err := migrateOne(ctx, pool, pgx.Identifier{table}.Sanitize(), table, m)
		if err != nil {
			return applied, fmt.Errorf("venturi: migration %s: %w", m.Name, err)
		}
		if done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

// migrateOne applies one migration unless table records it. This is bookkeeping, not
// queue SQL: the version table must exist before any migration.
func migrateOne(ctx context.Context, pool *pgxpool.Pool, quoted, table string, m Migration) (bool, error) {
	var done bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '.' || $1, 0))`, table); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+quoted+` (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+quoted+` WHERE version = $1)`, m.Version).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+quoted+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return err
		}
		done = true
		return nil
	})
	return done, err
}
