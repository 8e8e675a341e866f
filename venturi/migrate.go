package venturi

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

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

// MigrationState is one migration and whether a schema has it, as [MigrationStatus]
// reports it.
type MigrationState struct {
	Version int
	Name    string
	// Applied reports that the schema's version table records the migration, applied at
	// AppliedAt (the database's clock).
	Applied   bool
	AppliedAt *time.Time
	// Unknown reports a version the table records that these migrations do not have: a
	// newer venturi migrated the schema.
	Unknown bool
}

// MigrationStatus lists venturi's migrations in order with what the pool's schema records
// of each, and then the versions it records that this venturi does not know. It changes
// nothing and takes no lock: a readiness check or a deploy step can call it (the CLI's
// migrate status does). A schema never migrated has every migration pending.
func MigrationStatus(ctx context.Context, pool *pgxpool.Pool) ([]MigrationState, error) {
	return MigrationStatusFS(ctx, pool, MigrationsFS(), "venturi_migration")
}

// MigrationStatusFS is [MigrationStatus] for the migrations in fsys recorded in table, as
// [MigrateFS] applies them.
func MigrationStatusFS(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, table string) ([]MigrationState, error) {
	all, err := ReadMigrations(fsys)
	if err != nil {
		return nil, err
	}
	applied := map[int]MigrationState{}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{table}.Sanitize()).Scan(&exists); err != nil {
		return nil, err
	}
	if exists {
		rows, err := pool.Query(ctx, `SELECT version, name, applied_at FROM `+pgx.Identifier{table}.Sanitize())
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var m MigrationState
			var at time.Time
			if err := rows.Scan(&m.Version, &m.Name, &at); err != nil {
				rows.Close()
				return nil, err
			}
			m.Applied, m.AppliedAt = true, &at
			applied[m.Version] = m
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]MigrationState, 0, len(all)+len(applied))
	for _, m := range all {
		s := MigrationState{Version: m.Version, Name: m.Name}
		if r, ok := applied[m.Version]; ok {
			s.Applied, s.AppliedAt = true, r.AppliedAt
			delete(applied, m.Version)
		}
		out = append(out, s)
	}
	for _, r := range applied {
		r.Unknown = true
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y MigrationState) int { return cmp.Compare(x.Version, y.Version) })
	return out, nil
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
