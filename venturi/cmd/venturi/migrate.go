package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

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

func migrateStatus(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	type report struct {
		Schema     string
		Pending    int
		Migrations []venturi.MigrationState
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
func (a *app) migrations(ctx context.Context) ([]venturi.MigrationState, error) {
	return venturi.MigrationStatus(ctx, a.pool)
}

func intList(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
