package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/venturi-dev/venturi"
)

func migrateUp(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	type report struct {
		Schema  string
		Applied []int
	}
	return readCommand(a, connFlags(fs, true), noArgs, func(ctx context.Context, _ *venturi.Queue, _ []string) (report, error) {
		applied, err := venturi.Migrate(ctx, a.pool)
		return report{a.schemaName(), orEmpty(applied)}, err
	}, func(w io.Writer, r report) error {
		if len(r.Applied) == 0 {
			fmt.Fprintf(w, "schema %s is up to date\n", r.Schema)
		} else {
			fmt.Fprintf(w, "schema %s: applied %d migration(s): %s\n", r.Schema, len(r.Applied), intList(r.Applied))
		}
		return nil
	})
}

// migrationStatus is one migration, as migrate status reports it.
type migrationStatus struct {
	Version   int
	Name      string
	Applied   bool
	AppliedAt *time.Time
	// Unknown: the schema has it, this binary does not (a newer venturi migrated it).
	Unknown bool
}

func migrateStatus(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	type report struct {
		Schema     string
		Pending    int
		Migrations []migrationStatus
	}
	pending := 0
	show := readCommand(a, connFlags(fs, true), noArgs, func(ctx context.Context, _ *venturi.Queue, _ []string) (report, error) {
		list, err := a.migrations(ctx)
		for _, m := range list {
			if !m.Applied {
				pending++
			}
		}
		return report{a.schemaName(), pending, list}, err
	}, func(w io.Writer, r report) error {
		t := newTable(w, "VERSION", "NAME", "STATUS", "APPLIED AT")
		for _, m := range r.Migrations {
			status := "applied"
			switch {
			case m.Unknown:
				status = "applied (unknown to this venturi)"
			case !m.Applied:
				status = "pending"
			}
			t.row(fmt.Sprint(m.Version), m.Name, status, timePtrText(m.AppliedAt))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if r.Pending == 0 {
			fmt.Fprintf(w, "schema %s is up to date\n", r.Schema)
		} else {
			fmt.Fprintf(w, "schema %s: %d migration(s) pending: run venturi migrate up\n", r.Schema, r.Pending)
		}
		return nil
	})
	return func(ctx context.Context, args []string) error {
		if err := show(ctx, args); err != nil {
			return err
		}
		if pending > 0 {
			return exitCode(exitError) // like river validate: a deploy step can check it
		}
		return nil
	}
}

// migrations lists venturi's migrations with what the schema's version table records,
// and the versions it records that this binary does not know.
func (a *app) migrations(ctx context.Context) ([]migrationStatus, error) {
	all, err := venturi.Migrations()
	if err != nil {
		return nil, err
	}
	applied, err := a.appliedMigrations(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]migrationStatus, 0, len(all))
	for _, m := range all {
		s := migrationStatus{Version: m.Version, Name: m.Name}
		if r, ok := applied[m.Version]; ok {
			s.Applied, s.AppliedAt = true, &r.at
			delete(applied, m.Version)
		}
		out = append(out, s)
	}
	for v, r := range applied {
		out = append(out, migrationStatus{Version: v, Name: r.name, Applied: true, AppliedAt: &r.at, Unknown: true})
	}
	slices.SortFunc(out, func(x, y migrationStatus) int { return cmp.Compare(x.Version, y.Version) })
	return out, nil
}

type appliedMigration struct {
	name string
	at   time.Time
}

// appliedMigrations reads the version table venturi.Migrate writes (venturi_migration in
// the pool's schema); none when it does not exist yet. Like venturi.MigrateFS's own
// bookkeeping, this reads the migrations' table, not the queue's, so it is not in the
// sqlc queries.
func (a *app) appliedMigrations(ctx context.Context) (map[int]appliedMigration, error) {
	var exists bool
	if err := a.pool.QueryRow(ctx, `SELECT to_regclass('venturi_migration') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, err
	}
	out := map[int]appliedMigration{}
	if !exists {
		return out, nil
	}
	rows, err := a.pool.Query(ctx, `SELECT version, name, applied_at FROM venturi_migration`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		var m appliedMigration
		if err := rows.Scan(&v, &m.name, &m.at); err != nil {
			return nil, err
		}
		out[v] = m
	}
	return out, rows.Err()
}

func intList(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
