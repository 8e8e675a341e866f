package dbsqlc_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// recorder is a DBTX that records the statement a generated method sends, and sends
// nothing.
type recorder struct {
	sql  string
	args []any
}

var errRecorded = errors.New("recorded, not sent")

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.sql, r.args = sql, args
	return pgconn.CommandTag{}, errRecorded
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return nil, errRecorded
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return errRow{}
}

type errRow struct{}

func (errRow) Scan(...any) error { return errRecorded }

// TestIndexScanStatementsStayBelowJITCost: the statements the worker runs after
// SetLocalIndexScans (enable_seqscan off) are planned without a table scan. A scan left in
// such a plan costs it 10^10, past jit_above_cost: a finish that read its history lane's
// newest partition by an aggregate no index served was compiled by PostgreSQL on every
// call (~0.5 s) until SetLocalIndexScans turned JIT off as well; the scan itself would
// still read the whole table.
func TestIndexScanStatementsStayBelowJITCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.Schema(t), 2)
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for lane := range 2 {
		if _, err := pool.Exec(ctx, `SELECT venturi_history_extend($1::smallint, interval '1 hour', now() + interval '3 hours', 1000)`, lane+1); err != nil {
			t.Fatal(err)
		}
	}
	q := dbsqlc.New()
	id := []pgtype.UUID{{Valid: true}}
	statements := map[string]func(dbsqlc.DBTX){
		"FinishRuns": func(db dbsqlc.DBTX) {
			_, _ = q.FinishRuns(ctx, db, dbsqlc.FinishRunsParams{Ids: id, Tokens: []int64{1}, States: []string{"completed"},
				DelaysUs: []int64{0}, Failed: []bool{false}, SetCarry: []bool{false}, Carries: []string{""},
				Entries: []string{"[{}]"}, RetainCompletedUs: 1, RetainDeadUs: 1})
		},
		"ReleaseUnstarted": func(db dbsqlc.DBTX) {
			_, _ = q.ReleaseUnstarted(ctx, db, dbsqlc.ReleaseUnstartedParams{Ids: id, Tokens: []int64{1}})
		},
		"ExtendLeases": func(db dbsqlc.DBTX) {
			_, _ = q.ExtendLeases(ctx, db, dbsqlc.ExtendLeasesParams{Ids: id, Tokens: []int64{1}, LeaseUs: 1})
		},
		"RescueExpired": func(db dbsqlc.DBTX) {
			_, _ = q.RescueExpired(ctx, db, dbsqlc.RescueExpiredParams{MinUptimeUs: 1, Max: 10})
		},
		"PromoteDue": func(db dbsqlc.DBTX) { _, _ = q.PromoteDue(ctx, db, 10) },
		"SweepEnded": func(db dbsqlc.DBTX) {
			_, _ = q.SweepEnded(ctx, db, dbsqlc.SweepEndedParams{Max: 10, RetainCompletedUs: 1, RetainDeadUs: 1})
		},
		"HistoryHorizon": func(db dbsqlc.DBTX) { _, _ = q.HistoryHorizon(ctx, db, 1) },
	}
	for name, call := range statements {
		var r recorder
		call(&r)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := q.SetLocalIndexScans(ctx, tx); err != nil {
				return err
			}
			var limit float64
			var jit string
			if err := tx.QueryRow(ctx, `SELECT current_setting('jit_above_cost')::float8, current_setting('jit')`).Scan(&limit, &jit); err != nil {
				return err
			}
			if jit != "off" {
				t.Errorf("jit is %q under SetLocalIndexScans, want off", jit)
			}
			var plan []struct {
				Plan struct {
					TotalCost float64 `json:"Total Cost"`
				}
			}
			var out []byte
			if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+r.sql, r.args...).Scan(&out); err != nil {
				return err
			}
			if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
				return errors.Join(err, errors.New("no plan"))
			}
			if c := plan[0].Plan.TotalCost; c >= limit {
				t.Errorf("%s: plan cost %.0f under SetLocalIndexScans, at or past jit_above_cost %.0f (a table scan left in it?)", name, c, limit)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
