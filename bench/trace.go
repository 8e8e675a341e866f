package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// stmtTracer is a pgx tracer for `bench worker -trace`: it records the wall time of every
// query and batch (a batch is named after its statements) and prints a summary, so the
// worker's time can be split between its round trips.
type stmtTracer struct {
	mu   sync.Mutex
	durs map[string][]time.Duration
	rows map[string]int64
}

type traceKey struct{}

type traceStart struct {
	t     time.Time
	names []string
}

func newStmtTracer() *stmtTracer {
	return &stmtTracer{durs: map[string][]time.Duration{}, rows: map[string]int64{}}
}

func stmtName(sql string) string {
	sql = strings.TrimSpace(sql)
	if strings.HasPrefix(sql, "-- name: ") {
		f := strings.Fields(sql)
		if len(f) >= 3 {
			return f[2]
		}
	}
	if len(sql) > 40 {
		sql = sql[:40]
	}
	return strings.Join(strings.Fields(sql), " ")
}

func (t *stmtTracer) record(name string, d time.Duration, rows int64) {
	t.mu.Lock()
	t.durs[name] = append(t.durs[name], d)
	t.rows[name] += rows
	t.mu.Unlock()
}

func (t *stmtTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, &traceStart{t: time.Now(), names: []string{stmtName(d.SQL)}})
}

func (t *stmtTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if s, ok := ctx.Value(traceKey{}).(*traceStart); ok {
		t.record(s.names[0], time.Since(s.t), d.CommandTag.RowsAffected())
	}
}

func (t *stmtTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, &traceStart{t: time.Now()})
}

func (t *stmtTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if s, ok := ctx.Value(traceKey{}).(*traceStart); ok {
		s.names = append(s.names, stmtName(d.SQL))
		if n := d.CommandTag.RowsAffected(); n > 0 {
			t.mu.Lock()
			t.rows["batch:"+stmtName(d.SQL)] += n
			t.mu.Unlock()
		}
	}
}

func (t *stmtTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	if s, ok := ctx.Value(traceKey{}).(*traceStart); ok {
		t.record("batch["+strings.Join(s.names, "+")+"]", time.Since(s.t), 0)
	}
}

func (t *stmtTracer) summary(w io.Writer, wall time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.durs))
	for n := range t.durs {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(w, "trace over %v wall:\n%-60s %8s %10s %8s %8s %8s %10s\n", wall.Round(time.Millisecond), "statement", "calls", "total", "mean ms", "p50 ms", "p99 ms", "rows")
	for _, n := range names {
		d := append([]time.Duration(nil), t.durs[n]...)
		slices.Sort(d)
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		fmt.Fprintf(w, "%-60s %8d %10v %8.2f %8.2f %8.2f %10d\n", n, len(d), sum.Round(time.Millisecond),
			float64(sum)/float64(len(d))/1e6, float64(d[len(d)/2])/1e6, float64(d[len(d)*99/100])/1e6, t.rows[n])
	}
	for n, r := range t.rows {
		if strings.HasPrefix(n, "batch:") {
			fmt.Fprintf(w, "rows affected in batches by %s: %d\n", strings.TrimPrefix(n, "batch:"), r)
		}
	}
}
