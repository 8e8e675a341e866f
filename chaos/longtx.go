package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Long transaction (`chaos -longtx D`, README.md "Long transaction"): after a minute of
// steady load (the scripted workload and the live producer), a session of its own opens
// a REPEATABLE READ transaction, reads the job table (which takes its snapshot) and holds
// it for D, then commits; the load goes on for 90s after. While the snapshot is held,
// no dead tuple newer than it can be removed, by autovacuum or by page pruning. Every 10s
// the driver samples the job table (size, live and dead tuples, autovacuum runs) and the
// session's snapshot age (age(backend_xmin)); after the run, the live producer's jobs
// (due at their enqueue) give the claim latency, due -> claimed by the database's clock,
// in windows of 30s.

const (
	longTxBefore = 60 * time.Second
	longTxAfter  = 90 * time.Second
	longTxWindow = 30 * time.Second
)

const invLongTx = "the long transaction held its snapshot for its whole duration"

type growthSample struct {
	at                   time.Time
	total, heap, indexes int64 // bytes: pg_total_relation_size, pg_relation_size, pg_indexes_size
	live, dead           int64
	autovacuums, vacuums int64
	xminAge              int64 // the holder's age(backend_xmin); -1: no holder
	oldestXminAge        int64 // the oldest backend_xmin in the cluster
	holderXmin           int64
}

type longTx struct {
	d    *driver
	hold time.Duration

	mu       sync.Mutex
	begin    time.Time
	end      time.Time
	err      string
	samples  []growthSample
	xmins    map[int64]bool // the holder's backend_xmin values seen while it held
	latency  []latencyWindow
	longTxDB [2]time.Time // begin and end by the database's clock
}

// latencyWindow is the claim latency of the producer's jobs enqueued in a window.
type latencyWindow struct {
	from  time.Duration // after the workers started
	phase string
	lat   []time.Duration
}

func newLongTx(d *driver, hold time.Duration) *longTx {
	return &longTx{d: d, hold: hold, xmins: map[int64]bool{}}
}

// run waits longTxBefore, holds the snapshot for hold, and returns after the commit.
func (lt *longTx) run(ctx context.Context) {
	sleepCtx(ctx, time.Until(lt.d.started.Add(longTxBefore)))
	if ctx.Err() != nil {
		return
	}
	dsn, err := withParams(lt.d.o.dsn, "search_path", lt.d.o.schema, "application_name", "chaos-longtx")
	if err != nil {
		lt.fail(err)
		return
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		lt.fail(err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		lt.fail(err)
		return
	}
	var n int64
	var dbBegin time.Time
	if err := tx.QueryRow(ctx, `SELECT count(*), now() FROM venturi_job`).Scan(&n, &dbBegin); err != nil {
		lt.fail(err)
		return
	}
	at := time.Now()
	lt.mu.Lock()
	lt.begin, lt.longTxDB[0] = at, dbBegin
	lt.mu.Unlock()
	lt.d.logf("long transaction: snapshot taken (%d jobs visible); holding it for %v", n, lt.hold)
	sleepCtx(ctx, lt.hold)
	var dbEnd time.Time
	_ = conn.QueryRow(context.WithoutCancel(ctx), `SELECT clock_timestamp()`).Scan(&dbEnd)
	err = tx.Commit(context.WithoutCancel(ctx))
	until := time.Now()
	lt.mu.Lock()
	lt.end, lt.longTxDB[1] = until, dbEnd
	lt.mu.Unlock()
	detail := fmt.Sprintf("REPEATABLE READ, read-only, %d jobs visible at its snapshot", n)
	if err != nil {
		lt.fail(err)
		detail += "; commit: " + err.Error()
	}
	lt.d.record(fault{Kind: "long-transaction", At: at, Until: until, Detail: detail})
	lt.d.logf("long transaction: committed after %v", until.Sub(at).Round(time.Millisecond))
}

func (lt *longTx) fail(err error) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.err == "" {
		lt.err = err.Error()
	}
	lt.d.logf("long transaction: %v", err)
}

// sample records the job table's growth and the snapshot ages every 10s until ctx ends.
func (lt *longTx) sample(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		lt.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (lt *longTx) sampleOnce(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s := growthSample{at: time.Now(), xminAge: -1}
	err := lt.d.pool.QueryRow(qctx, `
		SELECT pg_total_relation_size('venturi_job'), pg_relation_size('venturi_job'), pg_indexes_size('venturi_job'),
		       n_live_tup, n_dead_tup, autovacuum_count, vacuum_count
		FROM pg_stat_user_tables WHERE relid = 'venturi_job'::regclass`).Scan(&s.total, &s.heap, &s.indexes, &s.live, &s.dead, &s.autovacuums, &s.vacuums)
	if err != nil {
		return
	}
	_ = lt.d.pool.QueryRow(qctx, `
		SELECT COALESCE(max(age(backend_xmin)) FILTER (WHERE application_name = 'chaos-longtx'), -1),
		       COALESCE(max(backend_xmin::text::bigint) FILTER (WHERE application_name = 'chaos-longtx'), -1),
		       COALESCE(max(age(backend_xmin)), -1)
		FROM pg_stat_activity WHERE backend_xmin IS NOT NULL`).Scan(&s.xminAge, &s.holderXmin, &s.oldestXminAge)
	lt.mu.Lock()
	lt.samples = append(lt.samples, s)
	if s.holderXmin >= 0 {
		lt.xmins[s.holderXmin] = true
	}
	lt.mu.Unlock()
}

// measureLatency reads the claim latency of the producer's jobs from the database: the
// claim time of each job's only run (attempted_at) less its enqueue (created_at), both by
// the database's clock. The windows are placed by the database's clock too, from the
// long transaction's begin.
func (lt *longTx) measureLatency(ctx context.Context) error {
	lt.mu.Lock()
	b, e := lt.longTxDB[0], lt.longTxDB[1]
	lt.mu.Unlock()
	if b.IsZero() {
		return nil
	}
	rows, err := lt.d.pool.Query(ctx, `SELECT created_at, attempted_at FROM venturi_job_all
		WHERE kind = $1 AND runs = 1 AND attempted_at IS NOT NULL AND (payload->>'sc') = $2
		  AND (CASE WHEN jsonb_typeof(payload->'seq') = 'number' THEN (payload->>'seq')::bigint ELSE 0 END) > $3`, Job{}.Kind(), scOK, producerSeqBase)
	if err != nil {
		return err
	}
	defer rows.Close()
	byWin := map[int]*latencyWindow{}
	for rows.Next() {
		var c, a time.Time
		if err := rows.Scan(&c, &a); err != nil {
			return err
		}
		off := c.Sub(b) // relative to the long transaction's begin
		w := int((off + longTxBefore) / longTxWindow)
		if off < -longTxBefore {
			w = -1 // before the first window (workers starting)
		}
		if w < 0 {
			continue
		}
		lw := byWin[w]
		if lw == nil {
			from := time.Duration(w)*longTxWindow - longTxBefore
			phase := "before"
			switch {
			case !e.IsZero() && !b.Add(from).Before(e):
				phase = "after"
			case from >= 0:
				phase = "during"
			}
			lw = &latencyWindow{from: from, phase: phase}
			byWin[w] = lw
		}
		lw.lat = append(lw.lat, a.Sub(c))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var out []latencyWindow
	for _, lw := range byWin {
		slices.Sort(lw.lat)
		out = append(out, *lw)
	}
	slices.SortFunc(out, func(a, b latencyWindow) int { return int(a.from - b.from) })
	lt.mu.Lock()
	lt.latency = out
	lt.mu.Unlock()
	return nil
}

// heldSnapshot checks that the holder kept one backend_xmin while it held and that its
// age grew: the snapshot was really held (a transaction that ended early, or one that
// took no snapshot, shows no xmin or a moving one).
func heldSnapshot(samples []growthSample, xmins map[int64]bool, begin, end time.Time) []string {
	if begin.IsZero() || end.IsZero() {
		return []string{invLongTx + ": the long transaction did not run to its end"}
	}
	var during []growthSample
	for _, s := range samples {
		if s.at.After(begin.Add(time.Second)) && s.at.Before(end.Add(-time.Second)) {
			during = append(during, s)
		}
	}
	switch {
	case len(during) < 2:
		return []string{fmt.Sprintf("%s: %d samples while it held (want at least 2)", invLongTx, len(during))}
	case len(xmins) != 1:
		return []string{fmt.Sprintf("%s: its backend_xmin took %d values while it held (want 1)", invLongTx, len(xmins))}
	case slices.ContainsFunc(during, func(s growthSample) bool { return s.xminAge < 0 }):
		return []string{invLongTx + ": a sample while it held found no snapshot"}
	case during[len(during)-1].xminAge <= during[0].xminAge:
		return []string{fmt.Sprintf("%s: its snapshot's age did not grow (%d -> %d xids)", invLongTx, during[0].xminAge, during[len(during)-1].xminAge)}
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// report adds the long transaction's figures and invariant to the summary.
func (lt *longTx) report(r *report) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	r.require(invLongTx, heldSnapshot(lt.samples, lt.xmins, lt.begin, lt.end))
	var b strings.Builder
	fmt.Fprintf(&b, "long transaction (REPEATABLE READ snapshot held %v, from %v after the workers started)\n", lt.hold, longTxBefore)
	if lt.err != "" {
		fmt.Fprintf(&b, "  error: %s\n", lt.err)
	}
	fmt.Fprintf(&b, "  claim latency of the live producer's jobs (due at enqueue -> claimed, database clock), by enqueue window\n")
	for _, w := range lt.latency {
		if len(w.lat) == 0 {
			continue
		}
		fmt.Fprintf(&b, "    %+5.0fs %-6s n=%-5d p50 %-9v p99 %-9v max %v\n", w.from.Seconds(), w.phase, len(w.lat),
			pct(w.lat, 50).Round(100*time.Microsecond), pct(w.lat, 99).Round(100*time.Microsecond), w.lat[len(w.lat)-1].Round(100*time.Microsecond))
	}
	fmt.Fprintf(&b, "  venturi_job every 10s (t from the long transaction's begin): total (heap + indexes), live and dead tuples, autovacuums, holder's snapshot age\n")
	for i, s := range lt.samples {
		if i%3 != 0 && i != len(lt.samples)-1 { // every 30s, and the last
			continue
		}
		t := s.at.Sub(lt.begin)
		age := "-"
		if s.xminAge >= 0 {
			age = fmt.Sprintf("%d xids", s.xminAge)
		}
		fmt.Fprintf(&b, "    %+5.0fs  %-10s (%s + %s)  live %-7d dead %-7d autovacuums %-3d snapshot %s\n", t.Seconds(), mib(s.total), mib(s.heap), mib(s.indexes),
			s.live, s.dead, s.autovacuums, age)
	}
	r.extra += b.String()
}
