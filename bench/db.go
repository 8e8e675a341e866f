package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/venturi-dev/venturi"
)

const (
	venturiSchema = "venturi_bench"
	riverSchema   = "river_bench"
)

// poolFor opens a pool whose search_path is schema. maxConns 0 keeps pgxpool's default
// (max(4, NumCPU)), which is what the worker processes use: both libraries' defaults.
func poolFor(ctx context.Context, url, schema string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if maxConns > 0 {
		cfg.MaxConns = int32(maxConns)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// setupSchemas drops and recreates both schemas and migrates them, so every run starts
// from the libraries' current migrations.
func setupSchemas(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, s := range []string{venturiSchema, riverSchema} {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE; CREATE SCHEMA "+s); err != nil {
			return err
		}
	}
	vp, err := poolFor(ctx, url, venturiSchema, 2)
	if err != nil {
		return err
	}
	defer vp.Close()
	if _, err := venturi.Migrate(ctx, vp); err != nil {
		return fmt.Errorf("venturi migrate: %w", err)
	}
	rp, err := poolFor(ctx, url, riverSchema, 2)
	if err != nil {
		return err
	}
	defer rp.Close()
	m, err := rivermigrate.New(riverpgxv5.New(rp), &rivermigrate.Config{Schema: riverSchema, Logger: quietLogger()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	return nil
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// resetJobs empties both job tables between runs.
func resetJobs(ctx context.Context, admin *pgxpool.Pool) error {
	_, err := admin.Exec(ctx, "TRUNCATE "+venturiSchema+".venturi_job, "+venturiSchema+".venturi_job_history; TRUNCATE "+riverSchema+".river_job, "+riverSchema+".river_leader")
	return err
}

// resetAll is resetJobs (resetVenturi: the backdrop kept when wanted) and, when
// graphile-worker is in this run, resetGraphile.
func (b *bencher) resetAll(ctx context.Context) error {
	if err := b.resetVenturi(ctx); err != nil {
		return err
	}
	return b.resetGraphile(ctx)
}

// finishedTable is where lib's finished jobs are read: venturi's pending and finished
// jobs in one relation (venturi_job_all), the peers' job table.
func finishedTable(lib string) string {
	if lib == libVenturi {
		return venturiSchema + ".venturi_job_all"
	}
	return jobTable(lib)
}

// jobTable is lib's job table (venturi's pending jobs: its finished ones are in
// venturi_job_history, see finishedTable).
func jobTable(lib string) string {
	switch {
	case lib == libVenturi:
		return venturiSchema + ".venturi_job"
	case isGraphile(lib):
		return graphileSchema + "._private_jobs"
	}
	return riverSchema + ".river_job"
}

// pendingCount counts the jobs of kind (of every kind when kind is "") not yet finished,
// one partial-index-friendly count per state so that the poll stays cheap while the last
// jobs complete (graphile-worker: graphilePending).
func pendingCount(ctx context.Context, admin *pgxpool.Pool, lib, kind string) (int64, error) {
	if isGraphile(lib) {
		return graphilePending(ctx, admin, kind)
	}
	var states []string
	if lib == libVenturi {
		states = []string{"available", "running", "scheduled"}
	} else {
		states = []string{"available", "running", "scheduled", "retryable", "pending"}
	}
	q := "SELECT 0"
	for _, s := range states {
		cond := " AND kind = " + quoteLit(kind)
		if kind == "" {
			cond = ""
		}
		if lib == libVenturi && s == "available" {
			// Through venturi's claim indexes (queue first): no index leads with the kind,
			// and a count of available jobs by kind alone scans every available job, which
			// with scenario 6's backlog of another kind steals the worker's CPU. Since
			// schema 6 there are two partial indexes, plain jobs (part IS NULL) and gated
			// ones; without the part condition neither applies and every poll is a
			// sequential scan of the whole table, dead rows included.
			for _, part := range []string{"part IS NULL", "part IS NOT NULL"} {
				q += fmt.Sprintf(" + (SELECT count(*) FROM %s WHERE state = '%s'%s AND queue = 'default' AND %s)", jobTable(lib), s, cond, part)
			}
			continue
		}
		q += fmt.Sprintf(" + (SELECT count(*) FROM %s WHERE state = '%s'%s)", jobTable(lib), s, cond)
	}
	var n int64
	err := admin.QueryRow(ctx, q).Scan(&n)
	return n, err
}

// completedCount counts the completed jobs of kind (of every kind when kind is "").
func completedCount(ctx context.Context, admin *pgxpool.Pool, lib, kind string) (int64, error) {
	var n int64
	err := admin.QueryRow(ctx, "SELECT count(*) FROM "+finishedTable(lib)+" WHERE state = 'completed' AND ($1 = '' OR kind = $1)", kind).Scan(&n)
	return n, err
}

func quoteLit(s string) string { return "'" + s + "'" } // constants only

func newRiverInsertClient(pool *pgxpool.Pool) (*river.Client[pgx.Tx], error) {
	return river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: riverSchema, Logger: quietLogger()})
}

// riverConfig is River's documented default (MaxWorkers 100 as in its docs, since a queue
// has no default) or the tuned configuration its own `river bench` uses.
func riverConfig(tuned bool, workers *river.Workers) *river.Config {
	cfg := &river.Config{
		Schema:  riverSchema,
		Logger:  quietLogger(),
		Workers: workers,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
	}
	if tuned {
		cfg.FetchCooldown = 2e6 // 2ms
		cfg.FetchPollInterval = 20e6
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2000}}
	}
	return cfg
}
