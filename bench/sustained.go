package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"

	"github.com/venturi-dev/venturi"
)

// Scenario 8: sustained load. One producer enqueues at a fixed rate, in one transaction
// every sustainTick, while one worker process (completed jobs retained sustainRetain)
// works the jobs; the job table and the latencies are sampled every sizes.sustain.every.
const (
	sustainTick         = 10 * time.Millisecond // producer period: one transaction per tick
	sustainDelay        = time.Second           // delay of the delayed jobs
	sustainDelayedShare = 0.5                   // share of the stream enqueued delayed
	sustainRetain       = 30 * time.Second      // completed-job retention of both libraries
	sustainRateShare    = 0.8                   // calibrated rate: share of the slowest drain rate
)

// sustainSample is one sampling point of one library's run.
type sustainSample struct {
	k int           // 1-based sample number
	t time.Duration // since the producer started

	statsOK                                  bool // the table statistics below were read
	sizeBytes, deadTuples, liveTuples        int64
	autovacuums                              int64 // since the run started
	available, scheduled, running, completed int64

	enqueued int64 // jobs the producer committed during the window
	enq, due *hist // handler starts during the window (see sustainRec)
	neg      int64 // negative latencies counted as zero
}

// sustainRun is one library's run of scenario 8.
type sustainRun struct {
	lib             string
	rate            float64
	dur, every      time.Duration
	samples         []*sustainSample
	offsetUs, rttUs int64 // the worker's clock offset to the database and its uncertainty
}

func (b *bencher) scenarioSustained(ctx context.Context) error {
	libs := b.order(0, libVenturi, libRiverTuned, libGraphileTuned)
	if len(libs) == 0 {
		return nil
	}
	args := append([]string{"-retain-completed", sustainRetain.String()}, b.o.workerArgs...)
	rate, how, err := b.sustainRate(ctx, libs, args)
	if err != nil {
		return err
	}
	logf("  8. sustained: %.0f jobs/s for %v per library (%s)", rate, b.o.sz.sustain.dur, how)
	var runs []*sustainRun
	for _, lib := range libs {
		run, err := b.sustainRun(ctx, lib, rate, args)
		if err != nil {
			return fmt.Errorf("%s: %w", lib, err)
		}
		runs = append(runs, run)
	}
	b.sustainReport(runs, how)
	if b.o.sustainCSV != "" {
		if err := writeSustainCSV(b.o.sustainCSV, runs); err != nil {
			return err
		}
		logf("wrote %s", b.o.sustainCSV)
	}
	if b.o.sustainPNG != "" {
		if err := plotSustained(b.o.sustainPNG, runs); err != nil {
			return err
		}
		logf("wrote %s", b.o.sustainPNG)
	}
	return nil
}

// sustainRate is the offered rate: -sustained-rate if set, else the lower of the mode's
// cap and sustainRateShare of the slowest library's drain rate. A library's drain rate is
// measured like scenario 4, with the worker configured as in the sustained run: calibJobs
// jobs enqueued first, then a worker process works them until none is left unfinished.
func (b *bencher) sustainRate(ctx context.Context, libs, args []string) (float64, string, error) {
	sz := b.o.sz.sustain
	if b.o.sustainRate > 0 {
		return b.o.sustainRate, "set by -sustained-rate", nil
	}
	slowest, slowLib := math.Inf(1), ""
	for _, lib := range libs {
		if err := b.resetAll(ctx); err != nil {
			return 0, "", err
		}
		p, err := b.openProducers(ctx, producerLib(lib))
		if err != nil {
			return 0, "", err
		}
		for i := 0; i < sz.calibJobs; i += 1000 {
			if err := p.enqueueSustain(ctx, min(1000, sz.calibJobs-i), 0); err != nil {
				p.close()
				return 0, "", err
			}
		}
		p.close()
		if err := b.settle(ctx, lib); err != nil {
			return 0, "", err
		}
		el, _, _, err := b.workUntilArgs(ctx, lib, "", append([]string{"-sustained"}, args...), b.allDone(lib, kindSustain, sz.calibJobs))
		if err != nil {
			return 0, "", err
		}
		r := float64(sz.calibJobs) / el.Seconds()
		logf("  8. sustained: calibration %s drained %d jobs at %.0f jobs/s", lib, sz.calibJobs, r)
		if r < slowest {
			slowest, slowLib = r, lib
		}
	}
	rate := min(sz.rateCap, sustainRateShare*slowest)
	how := fmt.Sprintf("the lower of %.0f jobs/s and %.0f%% of the slowest drain rate measured before the runs, %s's %.0f jobs/s over %d jobs",
		sz.rateCap, 100*sustainRateShare, slowLib, slowest, sz.calibJobs)
	return rate, how, nil
}

// producerLib is the library whose insert client enqueues for lib.
func producerLib(lib string) string {
	switch {
	case lib == libVenturi:
		return libVenturi
	case isGraphile(lib):
		return libGraphile
	}
	return libRiver
}

// enqueueSustain enqueues imm immediate and del delayed jobs of scenario 8 in one
// transaction, through EnqueueManyTx (venturi, delayed with After) or InsertManyTx
// (River, delayed with ScheduledAt). The transaction first reads its now(), which is the
// created_at both libraries give the rows, and every job carries it; a delayed job also
// carries now() + sustainDelay, which is exactly its due time in both libraries (venturi's
// After adds the delay to the transaction's now(); River stores the ScheduledAt given).
// Latencies are thus measured from the rows' own timestamps on the database clock.
// graphile-worker's jobs go in through its SQL API (add_jobs, one call for the
// transaction's jobs), the delayed ones with run_at now() + sustainDelay.
func (p *producers) enqueueSustain(ctx context.Context, imm, del int) error {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var now time.Time
	if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return err
	}
	e := now.UnixMicro()
	d := e + sustainDelay.Microseconds()
	switch {
	case p.lib == libGraphile:
		if _, err := tx.Exec(ctx, "SELECT count(*) FROM "+graphileSchema+".add_jobs(ARRAY("+
			"SELECT ROW($1::text, json_build_object('e', $2::bigint), NULL, NULL, NULL, NULL, NULL, NULL)::"+graphileSchema+".job_spec FROM generate_series(1, $3::int) "+
			"UNION ALL SELECT ROW($1::text, json_build_object('e', $2::bigint, 'd', $4::bigint), NULL, to_timestamp($4::bigint / 1e6), NULL, NULL, NULL, NULL)::"+graphileSchema+".job_spec FROM generate_series(1, $5::int)))",
			kindSustain, e, imm, d, del); err != nil {
			return fmt.Errorf("graphile add_jobs: %w", err)
		}
	case p.lib == libVenturi:
		if imm > 0 {
			tasks := make([]venturi.Task, imm)
			for i := range tasks {
				tasks[i] = SustainTask{E: e}
			}
			if _, err := p.q.EnqueueManyTx(ctx, tx, tasks); err != nil {
				return err
			}
		}
		if del > 0 {
			tasks := make([]venturi.Task, del)
			for i := range tasks {
				tasks[i] = SustainTask{E: e, D: d}
			}
			if _, err := p.q.EnqueueManyTx(ctx, tx, tasks, venturi.After(sustainDelay)); err != nil {
				return err
			}
		}
	default:
		params := make([]river.InsertManyParams, 0, imm+del)
		for range imm {
			params = append(params, river.InsertManyParams{Args: SustainArgs{E: e}})
		}
		due := &river.InsertOpts{ScheduledAt: time.UnixMicro(d)}
		for range del {
			params = append(params, river.InsertManyParams{Args: SustainArgs{E: e, D: d}, InsertOpts: due})
		}
		if _, err := p.river.InsertManyTx(ctx, tx, params); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// sustainProduce enqueues rate jobs/s (sustainDelayedShare of them delayed), one
// transaction per sustainTick, from start until end. Each tick sends what the rate owes
// since start, so a slow transaction is caught up by the following ones (at most ten
// ticks' worth per transaction); enqueued counts the committed jobs.
func sustainProduce(ctx context.Context, p *producers, start, end time.Time, rate float64, enqueued *atomic.Int64) error {
	tick := time.NewTicker(sustainTick)
	defer tick.Stop()
	maxBatch := max(int64(10*rate*sustainTick.Seconds()), 100)
	var sentImm, sentDel int64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			if !now.Before(end) {
				return nil
			}
			total := now.Sub(start).Seconds() * rate
			delayed := int64(total * sustainDelayedShare)
			imm := min(int64(total)-delayed-sentImm, maxBatch)
			del := min(delayed-sentDel, maxBatch)
			if imm+del <= 0 {
				continue
			}
			if err := p.enqueueSustain(ctx, int(imm), int(del)); err != nil {
				return err
			}
			sentImm, sentDel = sentImm+imm, sentDel+del
			enqueued.Add(imm + del)
		}
	}
}

// sustainRun runs one library: an empty table, a worker process, the producer for
// sizes.sustain.dur, and a sample every sizes.sustain.every.
func (b *bencher) sustainRun(ctx context.Context, lib string, rate float64, args []string) (*sustainRun, error) {
	sz := b.o.sz.sustain
	// Fresh schemas, as on a new deployment: no bloat and no planner statistics left by
	// earlier runs. The empty table is not analyzed either: after an ANALYZE of the empty
	// table, River's fetch statement ran for seconds per call once the table had grown,
	// until autovacuum's next analyze; an artifact of the bench, not of sustained load.
	if err := setupSchemas(ctx, b.o.url); err != nil {
		return nil, err
	}
	if err := b.resetGraphile(ctx); err != nil { // graphile-worker's schema stays: its table emptied
		return nil, err
	}
	if _, err := b.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	base := &sustainSample{}
	if err := b.tableStats(ctx, lib, base); err != nil {
		return nil, err
	}
	var (
		w   *workerProc
		err error
	)
	if isGraphile(lib) {
		w, err = b.graphile.start(b.o.url, lib, kindSustain, nil)
	} else {
		w, err = startSampledWorker(b.o.url, lib, args...)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if w != nil {
			w.kill()
		}
	}()
	prod, err := b.openProducers(ctx, producerLib(lib))
	if err != nil {
		return nil, err
	}
	defer prod.close()

	run := &sustainRun{lib: lib, rate: rate, dur: sz.dur, every: sz.every}
	var enqueued atomic.Int64
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	prodc := make(chan error, 1)
	go func() { prodc <- sustainProduce(pctx, prod, start, start.Add(sz.dur), rate, &enqueued) }()
	prodDone := false
	n := int((sz.dur + sz.every - 1) / sz.every)
	var prevEnq int64
	for k := 1; k <= n; k++ {
		timer := time.NewTimer(time.Until(start.Add(min(time.Duration(k)*sz.every, sz.dur))))
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, ctx.Err()
			case err := <-prodc:
				if err != nil {
					timer.Stop()
					return nil, fmt.Errorf("producer: %w", err)
				}
				prodc, prodDone = nil, true
			case <-timer.C:
				break wait
			}
		}
		s := &sustainSample{k: k, t: time.Since(start)}
		ws, err := w.sample()
		if err != nil {
			return nil, err
		}
		s.enq, s.due, s.neg = ws.enq, ws.due, ws.neg
		run.offsetUs, run.rttUs = ws.offsetUs, ws.rttUs
		e := enqueued.Load()
		s.enqueued, prevEnq = e-prevEnq, e
		sctx, scancel := context.WithTimeout(ctx, sz.every)
		if err := b.tableStats(sctx, lib, s); err != nil {
			logf("  8. sustained %s: table statistics at %v: %v", lib, s.t.Round(time.Second), err)
		}
		scancel()
		s.autovacuums -= base.autovacuums
		run.samples = append(run.samples, s)
		logf("  8. sustained %s t=%3.0fs: size %6.1f MiB, dead %7d, available %6d, scheduled %6d, running %5d, completed %7d; enqueued %6d, enqueue→handler p50 %s p99 %s ms, due→handler p50 %s p99 %s ms",
			lib, s.t.Seconds(), float64(s.sizeBytes)/(1<<20), s.deadTuples, s.available, s.scheduled, s.running, s.completed, s.enqueued,
			fmtMs(s.enq.quantile(.5)), fmtMs(s.enq.quantile(.99)), fmtMs(s.due.quantile(.5)), fmtMs(s.due.quantile(.99)))
	}
	if !prodDone {
		if err := <-prodc; err != nil {
			return nil, fmt.Errorf("producer: %w", err)
		}
	}
	q := w
	w = nil
	if err := q.stop(); err != nil {
		return nil, fmt.Errorf("worker stop: %w", err)
	}
	return run, nil
}

// tableStats reads the job table's size (heap, indexes and TOAST; venturi's with its
// history partitions), its dead and live tuples as the statistics collector last reported
// them, its autovacuum count, and its rows by state. The counts use the libraries' partial
// indexes; "completed" counts every terminal row (venturi: completed and dead, in either
// table; River: finalized), all completed here since handlers never fail. graphile-worker
// has no states: a row unlocked and due is available, one due later scheduled, a locked
// one running, and it keeps no finished job (a completion deletes the row). On error the
// sample keeps statsOK false.
func (b *bencher) tableStats(ctx context.Context, lib string, s *sustainSample) error {
	t := jobTable(lib)
	terminal := "(SELECT count(*) FROM " + t + " WHERE finalized_at IS NOT NULL)"
	size := "pg_total_relation_size(relid)"
	count := func(where string) string { return "(SELECT count(*) FROM " + t + " WHERE " + where + ")" }
	available, scheduled, running := count("state = 'available'"), count("state = 'scheduled'"), count("state = 'running'")
	switch {
	case isGraphile(lib):
		terminal = "0"
		available = count("locked_at IS NULL AND run_at <= now()")
		scheduled = count("locked_at IS NULL AND run_at > now()")
		running = count("locked_at IS NOT NULL")
	case lib == libVenturi:
		// Finished jobs are in the history's partitions: their rows, and their size.
		terminal = "(SELECT count(*) FROM " + finishedTable(lib) + " WHERE state IN ('completed', 'dead'))"
		size += " + (SELECT COALESCE(sum(pg_total_relation_size(p.relid)), 0) " +
			"FROM pg_partition_tree('" + venturiSchema + ".venturi_job_history') p WHERE p.isleaf)"
	}
	q := "SELECT " + size + ", n_dead_tup, n_live_tup, autovacuum_count, " +
		available + ", " + scheduled + ", " + running + ", " + terminal +
		" FROM pg_stat_user_tables WHERE relid = '" + t + "'::regclass"
	err := b.admin.QueryRow(ctx, q).Scan(&s.sizeBytes, &s.deadTuples, &s.liveTuples, &s.autovacuums,
		&s.available, &s.scheduled, &s.running, &s.completed)
	s.statsOK = err == nil
	return err
}

func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmtNum(v)
}

// sustainSummary is what the report shows of one run.
type sustainSummary struct {
	ref                         time.Duration // the reference point of the size ("minute 2")
	sizeRef, sizeEnd, sizeMax   int64         // sizeMax: largest after ref
	maxDead, maxAvail           int64
	maxAvailStart               int64 // the largest backlog before ref: a fresh schema's first minutes
	enqFirst, enqLast, enq, due hist
	offered, handled            float64 // jobs/s
	neg                         int64
}

// sustainRef is the reference point for the table's growth: minute 2, or half the run
// when it is shorter than 4 minutes (the table reaches its steady size once the retention
// and a few autovacuum rounds have passed, so growth in short runs means little).
func sustainRef(dur time.Duration) time.Duration { return min(2*time.Minute, dur/2) }

func summarize(r *sustainRun) *sustainSummary {
	m := &sustainSummary{ref: sustainRef(r.dur), sizeRef: -1}
	half := (len(r.samples) + 1) / 2
	var enqueued, handled int64
	for _, s := range r.samples {
		if s.statsOK {
			if m.sizeRef < 0 && time.Duration(s.k)*r.every >= m.ref {
				m.sizeRef = s.sizeBytes
			}
			if m.sizeRef >= 0 {
				m.sizeMax = max(m.sizeMax, s.sizeBytes)
			}
			m.sizeEnd = s.sizeBytes
			m.maxDead = max(m.maxDead, s.deadTuples)
			m.maxAvail = max(m.maxAvail, s.available)
			if time.Duration(s.k)*r.every <= m.ref {
				m.maxAvailStart = max(m.maxAvailStart, s.available)
			}
		}
		if s.k <= half {
			m.enqFirst.merge(s.enq)
		} else {
			m.enqLast.merge(s.enq)
		}
		m.enq.merge(s.enq)
		m.due.merge(s.due)
		m.neg += s.neg
		enqueued += s.enqueued
		handled += s.enq.n + s.due.n
	}
	if len(r.samples) > 0 {
		el := r.samples[len(r.samples)-1].t.Seconds()
		m.offered, m.handled = float64(enqueued)/el, float64(handled)/el
	}
	return m
}

func (r *report) addSustained(metric string, higher bool, lib string, v float64) *row {
	x := r.get(&r.sustained, "8", metric, higher)
	if !math.IsNaN(v) {
		x.vals[lib] = append(x.vals[lib], v)
	}
	x.ratioOf, x.ratioTo = libVenturi, []string{libRiverTuned}
	x.graphileTo = []string{libGraphileTuned}
	return x
}

// fmtSpan writes a duration as the report does: "2 min", "30 s".
func fmtSpan(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

func (b *bencher) sustainReport(runs []*sustainRun, how string) {
	if len(runs) == 0 {
		return
	}
	r0 := runs[0]
	ref, half := fmtSpan(sustainRef(r0.dur)), fmtSpan(r0.dur/2)
	for _, run := range runs {
		m := summarize(run)
		lib := run.lib
		mib := func(v int64) float64 {
			if v < 0 {
				return math.NaN() // no sample at the reference point
			}
			return float64(v) / (1 << 20)
		}
		growth := math.NaN()
		if m.sizeRef > 0 {
			growth = 100 * float64(m.sizeEnd-m.sizeRef) / float64(m.sizeRef)
		}
		b.rep.addSustained("offered jobs/s (committed by the producer)", true, lib, m.offered)
		b.rep.addSustained("handled jobs/s (handler starts)", true, lib, m.handled)
		b.rep.addSustained("table size at "+ref+" (MiB)", false, lib, mib(m.sizeRef))
		b.rep.addSustained("table size at the end (MiB)", false, lib, mib(m.sizeEnd))
		b.rep.addSustained("largest table size after "+ref+" (MiB)", false, lib, mib(m.sizeMax))
		g := b.rep.addSustained("size growth after "+ref+" (%)", false, lib, growth)
		g.ratioTo, g.target, g.check = nil, "within ±20%", valueWithin(libVenturi, 20)
		b.rep.addSustained("most dead tuples", false, lib, float64(m.maxDead))
		b.rep.addSustained("largest backlog (available rows)", false, lib, float64(m.maxAvail))
		b.rep.addSustained("largest backlog up to "+ref+" (available rows; the schema is fresh)", false, lib, float64(m.maxAvailStart))
		b.rep.addSustained("p99 enqueue→handler, first "+half+" (ms)", false, lib, m.enqFirst.quantile(.99))
		b.rep.addSustained("p99 enqueue→handler, last "+half+" (ms)", false, lib, m.enqLast.quantile(.99))
		d := b.rep.addSustained("p99 enqueue→handler, last/first", false, lib, m.enqLast.quantile(.99)/m.enqFirst.quantile(.99))
		d.target, d.check = "≤ 1.2", valueAtMost(libVenturi, 1.2)
		b.rep.addSustained("p50 enqueue→handler, whole run (ms)", false, lib, m.enq.quantile(.5))
		b.rep.addSustained("p50 due→handler, delayed jobs (ms)", false, lib, m.due.quantile(.5))
		p := b.rep.addSustained("p99 due→handler, delayed jobs (ms)", false, lib, m.due.quantile(.99))
		p.target, p.check = "≤ 20 ms", valueAtMost(libVenturi, 20)
		b.rep.sustainedNotes = append(b.rep.sustainedNotes, fmt.Sprintf("%s: worker clock offset to the database %+d µs (±%d µs); %d latencies below zero counted as zero.",
			lib, run.offsetUs, run.rttUs/2, m.neg))
	}
	b.rep.sustainedIntro = fmt.Sprintf("%.0f jobs/s for %s per library, half of them delayed by %s; completed jobs retained %s; a sample every %s. "+
		"Rate: %s. One run per library, whatever -reps says; each starts from freshly migrated schemas.",
		r0.rate, fmtSpan(r0.dur), fmtSpan(sustainDelay), fmtSpan(sustainRetain), fmtSpan(r0.every), how)
	b.rep.sustainedCSV, b.rep.sustainedPNG = b.o.sustainCSV, b.o.sustainPNG
}

// valueWithin: the column's median lies within ±k.
func valueWithin(col string, k float64) func(*row) (bool, bool) {
	return func(x *row) (bool, bool) {
		v := x.vals[col]
		return math.Abs(median(v)) <= k, len(v) > 0
	}
}

func writeSustainCSV(path string, runs []*sustainRun) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"lib", "rate", "t_s", "size_bytes", "dead_tuples", "live_tuples", "autovacuums",
		"available", "scheduled", "running", "completed", "enqueued", "handled",
		"enq_n", "enq_p50_ms", "enq_p99_ms", "due_n", "due_p50_ms", "due_p99_ms"})
	num := func(v int64, ok bool) string {
		if !ok {
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	ms := func(v float64) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	for _, r := range runs {
		for _, s := range r.samples {
			ok := s.statsOK
			_ = w.Write([]string{r.lib, strconv.FormatFloat(r.rate, 'f', 0, 64), strconv.FormatFloat(s.t.Seconds(), 'f', 1, 64),
				num(s.sizeBytes, ok), num(s.deadTuples, ok), num(s.liveTuples, ok), num(s.autovacuums, ok),
				num(s.available, ok), num(s.scheduled, ok), num(s.running, ok), num(s.completed, ok),
				num(s.enqueued, true), num(s.enq.n+s.due.n, true),
				num(s.enq.n, true), ms(s.enq.quantile(.5)), ms(s.enq.quantile(.99)),
				num(s.due.n, true), ms(s.due.quantile(.5)), ms(s.due.quantile(.99))})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
