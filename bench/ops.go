package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/dashboard"
)

// Scenario 14: the server side of every dashboard page with a large job table. The jobs
// are bulk-loaded in mixed states, a venturi worker samples the stats table, and each page
// is served by the dashboard's handler through httptest (no network, no browser): the
// time is the handler's, its queries included. Target: every page under 100 ms at p99.

// opsMix is the share of each state in the loaded table (the rest is completed).
var opsMix = []struct {
	state string
	share float64
}{
	{"available", 0.10}, {"scheduled", 0.05}, {"waiting", 0.01}, {"dead", 0.02}, {"cancelled", 0.02},
}

const opsTarget = 100 * time.Millisecond

type opsPage struct {
	name, path, reads string
	p50, p99, max     time.Duration
}

type opsReport struct {
	jobs, requests int
	load           time.Duration
	pages          []opsPage
	calls          []opsPage // the venturi calls alone
}

// loadOpsJobs bulk-inserts n jobs in the mix of opsMix over three kinds and two queues,
// with ULID-shaped time-ordered IDs, journals on the finished ones (a note that one in
// ten dead jobs says "timeout" in) and finished times over the last hour.
func (b *bencher) loadOpsJobs(ctx context.Context, n int) error {
	const chunk = 200_000
	for done := 0; done < n; done += chunk {
		k := min(chunk, n-done)
		_, err := b.admin.Exec(ctx, `INSERT INTO `+venturiSchema+`.venturi_job
			(id, kind, queue, state, priority, payload, run_at, runs, failures, journal, created_at, attempted_at, finished_at)
			SELECT id, kind, queue, st::`+venturiSchema+`.venturi_job_state, 0, jsonb_build_object('n', g, 'user', g % 1000),
			       CASE WHEN st = 'scheduled' THEN now() + interval '1 hour' ELSE now() - interval '1 microsecond' * ($2::int - g) END,
			       CASE WHEN st IN ('completed', 'dead', 'cancelled') THEN 1 ELSE 0 END,
			       CASE WHEN st = 'dead' THEN 1 ELSE 0 END,
			       CASE WHEN st IN ('completed', 'dead') THEN jsonb_build_array(jsonb_build_object(
			           'event', st, 'run', 1, 'worker', 'bench-worker',
			           'note', CASE WHEN st = 'dead' AND g % 10 = 0 THEN 'upstream timeout after 30s' WHEN st = 'dead' THEN 'permanent: bad input' ELSE 'done' END,
			           'started_at', now() - interval '1 second', 'at', now()))
			            ELSE '[]'::jsonb END,
			       now() - interval '1 microsecond' * ($2::int - g),
			       CASE WHEN st IN ('completed', 'dead', 'cancelled') THEN now() - interval '1 second' END,
			       CASE WHEN st IN ('completed', 'dead', 'cancelled') THEN now() - interval '1 millisecond' * ((($2::int - g) * 3600000::bigint) / $2::int) END
			FROM (
			    SELECT g,
			           (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
			            || lpad(to_hex($3::bigint + g), 20, '0'))::uuid AS id,
			           (ARRAY['bench.fetch', 'bench.render', 'bench.mail'])[1 + g % 3] AS kind,
			           (ARRAY['default', 'default', 'imports'])[1 + (g / 7) % 3] AS queue,
			           CASE WHEN r < $4 THEN 'available' WHEN r < $5 THEN 'scheduled' WHEN r < $6 THEN 'waiting'
			                WHEN r < $7 THEN 'dead' WHEN r < $8 THEN 'cancelled' ELSE 'completed' END AS st
			    FROM (SELECT g, ((g * 7919) % 10000) / 10000.0 AS r FROM generate_series(1, $1::int) g) x
			) y`, k, n, done, cum(1), cum(2), cum(3), cum(4), cum(5))
		if err != nil {
			return err
		}
	}
	return nil
}

// cum is the cumulative share of the first i states of opsMix.
func cum(i int) float64 {
	s := 0.0
	for _, m := range opsMix[:i] {
		s += m.share
	}
	return s
}

func (b *bencher) scenarioOps(ctx context.Context) error {
	n, reqs := b.o.opsJobs, b.o.opsRequests
	if err := resetJobs(ctx, b.admin); err != nil {
		return err
	}
	logf("ops: loading %d jobs", n)
	start := time.Now()
	if err := b.loadOpsJobs(ctx, n); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if err := b.vacuumSettle(ctx); err != nil {
		return err
	}
	rep := &opsReport{jobs: n, requests: reqs, load: time.Since(start)}
	pool, err := poolFor(ctx, b.o.url, venturiSchema, 10)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	// A worker for the stats sampler (it handles a kind that has no jobs) and for a
	// breaker, a schedule and audit entries so that every page has rows.
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{ID: "bench-ops", StatsInterval: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := venturi.RegisterFunc(w, func(context.Context, opsIdle, *venturi.Run[struct{}], struct{}) (venturi.Outcome, error) {
		return venturi.Completed(), nil
	}); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	if _, err := q.Schedule(ctx, venturi.Schedule{Name: "bench-nightly", Cron: "0 3 * * *", Task: opsIdle{}}); err != nil {
		return err
	}
	actx := venturi.WithActor(ctx, "bench")
	if err := q.PauseQueue(actx, "paused-queue"); err != nil {
		return err
	}
	var since time.Time
	if err := b.admin.QueryRow(ctx, "SELECT now()").Scan(&since); err != nil {
		return err
	}
	logf("ops: waiting for a stats sample")
	for {
		st, err := q.Stats(ctx)
		if err != nil {
			return err
		}
		if st.SampledAt.After(since) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}

	// Sample IDs for the detail pages and a cursor for a second page.
	dead, err := q.ListJobs(ctx, venturi.JobFilter{States: []venturi.State{venturi.StateDead}}, "", 100)
	if err != nil {
		return err
	}
	if len(dead.Jobs) == 0 {
		return fmt.Errorf("no dead jobs were loaded")
	}
	first, err := q.ListJobs(ctx, venturi.JobFilter{}, "", dashboard.DefaultPageSize)
	if err != nil {
		return err
	}
	payload, err := q.ListJobs(ctx, venturi.JobFilter{Payload: []venturi.PathMatch{{Path: []string{"user"}, Value: "42"}}}, "", dashboard.DefaultPageSize)
	if err != nil {
		return err
	}
	h, err := dashboard.New(q, dashboard.Config{Prefix: "/ops", Logger: slog.New(slog.DiscardHandler),
		Access: func(*http.Request) dashboard.Access {
			return dashboard.Access{Actor: "bench", Grants: dashboard.AllActions}
		}})
	if err != nil {
		return err
	}
	ids := make([]ulid.ULID, len(dead.Jobs))
	for i, j := range dead.Jobs {
		ids[i] = j.ID
	}
	pages := []opsPage{
		{name: "overview", path: "/ops/", reads: "Stats, StatsHistory (1 h), ListJobs(state:dead, 10)"},
		{name: "live stats (JSON)", path: "/ops/api/stats", reads: "Stats"},
		{name: "jobs, newest first", path: "/ops/jobs", reads: "ListJobs, Stats"},
		{name: "jobs, second page", path: "/ops/jobs?cursor=" + first.Next, reads: "ListJobs (cursor), Stats"},
		{name: "jobs tab available", path: "/ops/jobs?state=available", reads: "ListJobs (claim order), Stats"},
		{name: "jobs tab scheduled", path: "/ops/jobs?state=scheduled", reads: "ListJobs (due time), Stats"},
		{name: "jobs tab completed", path: "/ops/jobs?state=completed", reads: "ListJobs (newest finished), Stats"},
		{name: "jobs filter kind + queue", path: "/ops/jobs?q=kind:bench.mail+queue:imports", reads: "ListJobs, Stats"},
		{name: "jobs filter payload path", path: "/ops/jobs?q=payload.user:42", reads: "ListJobs, Stats"},
		{name: "jobs filter payload path, page 2", path: "/ops/jobs?q=payload.user:42&cursor=" + payload.Next, reads: "ListJobs (search window), Stats"},
		{name: "jobs filter note alone", path: "/ops/jobs?q=note:timeout", reads: "ListJobs (search window), Stats"},
		{name: "jobs filter key alone (no match)", path: "/ops/jobs?q=key:nothing", reads: "ListJobs (search window), Stats"},
		{name: "jobs filter created within", path: "/ops/jobs?q=within:10m", reads: "ListJobs, Stats"},
		{name: "dead jobs", path: "/ops/dead", reads: "ListJobs(state:dead), Stats"},
		{name: "dead jobs, note filter", path: "/ops/dead?q=note:timeout", reads: "ListJobs(state:dead note:), Stats"},
		{name: "job detail", path: "", reads: "JobDetail"},
		{name: "bulk retry dry run (dead)", path: "/ops/bulk/retry?q=state:dead", reads: "RetryJobs(DryRun)"},
		{name: "queues", path: "/ops/queues", reads: "Stats"},
		{name: "cron", path: "/ops/cron", reads: "Schedules"},
		{name: "breakers", path: "/ops/breakers", reads: "ListCircuits (a page)"},
		{name: "audit log", path: "/ops/audit", reads: "AuditLog"},
	}
	// The venturi calls the pages make, alone, so that a slow page can be traced to its
	// reads.
	calls := []struct {
		name string
		fn   func() error
	}{
		{"Stats", func() error { _, err := q.Stats(ctx); return err }},
		{"StatsHistory (1 h)", func() error { _, err := q.StatsHistory(ctx, since.Add(-time.Hour)); return err }},
		{"ListJobs (newest first)", func() error { _, err := q.ListJobs(ctx, venturi.JobFilter{}, "", 50); return err }},
		{"ListJobs (state:completed)", func() error {
			_, err := q.ListJobs(ctx, venturi.JobFilter{States: []venturi.State{venturi.StateCompleted}}, "", 50)
			return err
		}},
		{"ListJobs (state:dead)", func() error {
			_, err := q.ListJobs(ctx, venturi.JobFilter{States: []venturi.State{venturi.StateDead}}, "", 50)
			return err
		}},
		{"JobDetail", func() error { _, err := q.JobDetail(ctx, dead.Jobs[0].ID); return err }},
	}
	// Round robin: each round requests every page and makes every call once, so that a
	// slow stretch of the machine (autovacuum after the load, a neighbour's burst) spreads
	// over all of them instead of landing on the first ones. Three rounds warm up.
	pageTimes := make([][]float64, len(pages))
	callTimes := make([][]float64, len(calls))
	for r := -3; r < reqs; r++ {
		for i := range pages {
			p := &pages[i]
			path := p.path
			if path == "" {
				path = "/ops/jobs/" + ids[(r+3)%len(ids)].String()
			}
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
			rec := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(rec, req)
			d := time.Since(t0)
			if rec.Code != http.StatusOK {
				return fmt.Errorf("ops: GET %s: %d: %.300s", path, rec.Code, rec.Body.String())
			}
			if r >= 0 {
				pageTimes[i] = append(pageTimes[i], float64(d))
			}
		}
		for i, c := range calls {
			t0 := time.Now()
			if err := c.fn(); err != nil {
				return fmt.Errorf("ops: %s: %w", c.name, err)
			}
			if r >= 0 {
				callTimes[i] = append(callTimes[i], float64(time.Since(t0)))
			}
		}
	}
	for i := range pages {
		p := &pages[i]
		p.p50, p.p99, p.max = dist(pageTimes[i])
		logf("ops: %-28s p50 %v p99 %v", p.name, p.p50.Round(10*time.Microsecond), p.p99.Round(10*time.Microsecond))
	}
	for i, c := range calls {
		var op opsPage
		op.name = c.name
		op.p50, op.p99, op.max = dist(callTimes[i])
		rep.calls = append(rep.calls, op)
	}
	rep.pages = pages
	b.rep.ops = rep
	return nil
}

// dist is the median, 99th percentile and maximum of durations held as float64.
func dist(v []float64) (p50, p99, top time.Duration) {
	return time.Duration(quantile(v, 0.5)), time.Duration(quantile(v, 0.99)), time.Duration(slices.Max(v))
}

// opsIdle is the kind the scenario's worker registers: no job of it exists.
type opsIdle struct{}

func (opsIdle) Kind() string { return "bench.ops-idle" }

func (r *opsReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 14: dashboard pages, server side, with %s jobs\n\n", fmtInt(r.jobs))
	mix := []string{}
	for _, m := range opsMix {
		mix = append(mix, fmt.Sprintf("%s %.0f%%", m.state, m.share*100))
	}
	fmt.Fprintf(b, "Jobs bulk-loaded in %v (%s, the rest completed; three kinds, two queues), then VACUUM ANALYZE; a worker samples the stats table every second. "+
		"Each page is served %d times (after three warm-up rounds, round robin over the pages) by `dashboard.New`'s handler through httptest, one request at a time: the time is the handler's, its queries included, without network or browser.\n\n",
		r.load.Round(time.Second), strings.Join(mix, ", "), r.requests)
	fmt.Fprintf(b, "| Page | Reads | p50 | p99 | max | Target | Met |\n|---|---|---|---|---|---|---|\n")
	for _, p := range r.pages {
		met := "yes"
		if p.p99 >= opsTarget {
			met = "**no**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | p99 < %v | %s |\n", p.name, p.reads, ms(p.p50), ms(p.p99), ms(p.max), opsTarget, met)
	}
	fmt.Fprintf(b, "\nThe venturi calls the pages make, alone (in the same rounds):\n\n| Call | p50 | p99 | max |\n|---|---|---|---|\n")
	for _, c := range r.calls {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", c.name, ms(c.p50), ms(c.p99), ms(c.max))
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// fmtInt writes n with thousands separators.
func fmtInt(n int) string {
	s := fmt.Sprint(n)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
