package main

import (
	"context"
	"fmt"
)

// -statements: each measured drain of scenario 11 logs its statements with the most
// buffer accesses, from pg_stat_statements (reset before the worker starts), to show
// where a variant's server work goes and how it changes with the backdrop. The extension
// must be in shared_preload_libraries; with pg_stat_statements.track = all the statements
// inside venturi's functions are listed too (their function's call counts them as well).

// statementsTop is how many statements a drain logs.
const statementsTop = 8

// statementsReset creates the extension when needed and resets its counters.
func (b *bencher) statementsReset(ctx context.Context) error {
	if !b.o.statements {
		return nil
	}
	_, err := b.admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()")
	return err
}

// statementsLog logs the drain's statements with the most shared-buffer accesses, per call
// and per job of the n the drain worked.
func (b *bencher) statementsLog(ctx context.Context, label string, n int) error {
	if !b.o.statements {
		return nil
	}
	rows, err := b.admin.Query(ctx, `SELECT calls, rows, shared_blks_hit + shared_blks_read, total_exec_time,
		       left(regexp_replace(query, '\s+', ' ', 'g'), 100)
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY shared_blks_hit + shared_blks_read DESC LIMIT $1`, statementsTop)
	if err != nil {
		return err
	}
	defer rows.Close()
	logf("  statements, %s (by buffers; per call, per job of %d):", label, n)
	for rows.Next() {
		var (
			calls, nrows, bufs int64
			ms                 float64
			query              string
		)
		if err := rows.Scan(&calls, &nrows, &bufs, &ms, &query); err != nil {
			return err
		}
		logf("    %8d calls %9d rows | %8.1f buffers/call %6.2f/job | %7.3f ms/call %6.2f µs/job | %s",
			calls, nrows, float64(bufs)/float64(max(calls, 1)), float64(bufs)/float64(n),
			ms/float64(max(calls, 1)), ms*1000/float64(n), query)
	}
	return rows.Err()
}

// backdropLabel names a drain of variant v for the statements' log.
func backdropLabel(v string, on bool) string {
	if on {
		return fmt.Sprintf("11. %s, with the backdrop", v)
	}
	return fmt.Sprintf("11. %s", v)
}
