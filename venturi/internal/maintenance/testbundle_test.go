package maintenance_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// testBundle is what every test of the package works with: a pool on a fresh, migrated
// schema and the generated queries.
type testBundle struct {
	pool *pgxpool.Pool
	q    *dbsqlc.Queries
	log  *slog.Logger
}

// setup returns a bundle on a schema of the test's own.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 4)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &testBundle{pool: pool, q: dbsqlc.New(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// exec runs sql on the bundle's schema or fails the test.
func (b *testBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// inTx runs fn in a transaction of its own, committed when fn returns nil, or fails the test.
func (b *testBundle) inTx(t *testing.T, fn func(pgx.Tx) error) {
	t.Helper()
	if err := pgx.BeginTxFunc(context.Background(), b.pool, pgx.TxOptions{}, fn); err != nil {
		t.Fatalf("transaction: %v", err)
	}
}

// txFunc is the bundle's pool as a maintenance.TxFunc.
func (b *testBundle) txFunc(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{}, fn)
}

// jobState returns the state of the job named by its kind (every test job has a kind of
// its own), pending or finished, or "" when there is none.
func (b *testBundle) jobState(t *testing.T, kind string) string {
	t.Helper()
	var state string
	err := b.pool.QueryRow(context.Background(), `SELECT state::text FROM venturi_job_all WHERE kind = $1`, kind).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatalf("state of %s: %v", kind, err)
	}
	return state
}
