package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi"
)

// Overload (`chaos -overload D`, README.md "Overload"): no faults; producers enqueue at
// three times the workers' drain rate for D, then stop. The drain rate is measured first
// on a backlog of calibration jobs. While producers run, the driver samples each worker's
// resident memory (VmRSS) and the backlog every second and times every enqueue; then it
// times the drain of the backlog. Every job is an ordinary `ok` job, so the checker's
// invariants (0 lost, none completed twice, fencing) apply as in any run.

const (
	overloadWorkMs      = 200  // each job's simulated work: the handlers, not the CPU, bound the drain rate
	overloadCalibration = 1500 // jobs of the calibration backlog
	overloadFactor      = 3    // producers' rate / drain rate
	overloadProducers   = 48   // each enqueue is one call, as from request handlers
)

type overload struct {
	d   *driver
	dur time.Duration

	mu      sync.Mutex
	expects []expect
	seq     int64
	lat     [][]time.Duration // enqueue latencies, by 10 s window
	errs    map[string]int    // enqueue errors by message

	drainRate   float64 // calibration: completions per second
	target      float64 // producers' rate
	enqueued    int
	enqSpan     time.Duration
	backlogPeak int
	backlogEnd  int
	drainTime   time.Duration
	afterRate   float64
	rss         map[int][]int64 // worker slot -> VmRSS samples (KiB), one a second
	rssHalf     int             // samples in the first half of the overload
}

func newOverload(d *driver, dur time.Duration) *overload {
	return &overload{d: d, dur: dur, errs: map[string]int{}, rss: map[int][]int64{}}
}

func (ov *overload) next() int64 {
	ov.mu.Lock()
	defer ov.mu.Unlock()
	ov.seq++
	return ov.seq
}

// enqueueCalibration enqueues the calibration backlog, due at once, before any worker
// runs.
func (ov *overload) enqueueCalibration(ctx context.Context) (int, error) {
	q := venturi.NewQueue(ov.d.pool, venturi.QueueConfig{})
	var tasks []venturi.Task
	for range overloadCalibration {
		tasks = append(tasks, Job{Seq: ov.next(), Scenario: scOK, WorkMs: overloadWorkMs})
	}
	res, err := q.EnqueueMany(ctx, tasks)
	if err != nil {
		return 0, err
	}
	for i, r := range res {
		ov.expects = append(ov.expects, expect{id: r.ID, seq: tasks[i].(Job).Seq, scenario: scOK, state: "completed"})
	}
	return len(res), nil
}

func (ov *overload) pending(ctx context.Context) (int, error) {
	var n int
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := ov.d.pool.QueryRow(qctx, `SELECT count(*) FROM venturi_job WHERE state NOT IN ('completed', 'dead', 'cancelled') AND kind = $1`,
		Job{}.Kind()).Scan(&n)
	return n, err
}

// run measures the drain rate on the calibration backlog, overloads the workers for dur,
// and times the drain of the backlog left. It ends when the backlog is drained (or ctx).
func (ov *overload) run(ctx context.Context) {
	d := ov.d
	// Calibration: the rate between 10% and 90% of the backlog done (start-up excluded).
	var t10, t90 time.Time
	for ctx.Err() == nil {
		n, err := ov.pending(ctx)
		if err == nil {
			done := overloadCalibration - n
			if t10.IsZero() && done >= overloadCalibration/10 {
				t10 = time.Now()
			}
			if done >= overloadCalibration*9/10 {
				t90 = time.Now()
				break
			}
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	if ctx.Err() != nil {
		return
	}
	ov.drainRate = float64(overloadCalibration*8/10) / t90.Sub(t10).Seconds()
	ov.target = overloadFactor * ov.drainRate
	d.logf("overload: drain rate %.0f jobs/s; producers enqueue at %.0f jobs/s for %v", ov.drainRate, ov.target, ov.dur)

	// Overload: a pacer hands out enqueue permits at the target rate; producers take them.
	start := time.Now()
	octx, stop := context.WithTimeout(ctx, ov.dur)
	defer stop()
	permits := make(chan struct{}, 1024)
	go func() {
		defer close(permits)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		owed := 0.0
		last := time.Now()
		for {
			select {
			case <-octx.Done():
				return
			case now := <-tick.C:
				owed += ov.target * now.Sub(last).Seconds()
				last = now
				for ; owed >= 1; owed-- {
					select {
					case permits <- struct{}{}:
					default: // producers are behind: the permit is lost (the rate achieved says so)
					}
				}
			}
		}
	}()
	q := venturi.NewQueue(d.pool, venturi.QueueConfig{})
	var wg sync.WaitGroup
	for range overloadProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range permits {
				if octx.Err() != nil {
					continue // permits left in the buffer when the overload ended
				}
				seq := ov.next()
				t0 := time.Now()
				ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
				res, err := q.Enqueue(ectx, Job{Seq: seq, Scenario: scOK, WorkMs: overloadWorkMs})
				cancel()
				lat := time.Since(t0)
				w := int(t0.Sub(start) / (10 * time.Second))
				ov.mu.Lock()
				if err != nil {
					ov.errs[trunc(err.Error(), 100)]++ // not acknowledged: not expected either
				} else {
					ov.expects = append(ov.expects, expect{id: res.ID, seq: seq, scenario: scOK, state: "completed"})
					ov.enqueued++
					for len(ov.lat) <= w {
						ov.lat = append(ov.lat, nil)
					}
					ov.lat[w] = append(ov.lat[w], lat)
				}
				ov.mu.Unlock()
			}
		}()
	}
	// Sampler: every worker's VmRSS and the backlog, once a second.
	sample := func() {
		d.mu.Lock()
		procs := slices.Clone(d.procs)
		d.mu.Unlock()
		for _, p := range procs {
			if p != nil {
				if kb, err := vmRSS(p.pid); err == nil {
					ov.rss[p.slot] = append(ov.rss[p.slot], kb)
				}
			}
		}
		if n, err := ov.pending(ctx); err == nil {
			ov.backlogPeak = max(ov.backlogPeak, n)
		}
	}
	tick := time.NewTicker(time.Second)
	for octx.Err() == nil {
		select {
		case <-octx.Done():
		case <-tick.C:
			sample()
			if time.Since(start) < ov.dur/2 {
				ov.rssHalf++
			}
		}
	}
	tick.Stop()
	wg.Wait()
	ov.enqSpan = time.Since(start)
	if ctx.Err() != nil {
		return
	}
	sample()

	// Drain: the backlog left, timed to its last job.
	drainFrom := time.Now()
	n0, _ := ov.pending(ctx)
	ov.backlogEnd = n0
	ov.backlogPeak = max(ov.backlogPeak, n0)
	d.logf("overload: producers stopped after %d enqueues; backlog %d; draining", ov.enqueued, n0)
	lastSample := time.Now()
	for ctx.Err() == nil {
		if n, err := ov.pending(ctx); err == nil && n == 0 {
			break
		}
		if time.Since(lastSample) >= time.Second {
			sample()
			lastSample = time.Now()
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	ov.drainTime = time.Since(drainFrom)
	if ov.drainTime > 0 {
		ov.afterRate = float64(n0) / ov.drainTime.Seconds()
	}
}

// vmRSS reads a process's resident set size in KiB.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS")
}

// saveExpects writes the expected outcome of every acknowledged enqueue.
func (ov *overload) saveExpects(ctx context.Context) error {
	ov.mu.Lock()
	es := slices.Clone(ov.expects)
	ov.mu.Unlock()
	rows := make([][]any, 0, len(es))
	for _, e := range es {
		rows = append(rows, []any{uuidOf(e.id), e.seq, e.scenario, e.state})
	}
	_, err := ov.d.pool.CopyFrom(ctx, pgx.Identifier{"chaos_expect"}, []string{"job_id", "seq", "scenario", "want_state"}, pgx.CopyFromRows(rows))
	return err
}

const (
	invOverloadRSS   = "overload: worker memory bounded (2nd-half peak <= 1.25 x 1st-half peak + 16 MiB)"
	invOverloadDrain = "overload: backlog drained, at >= half the calibrated rate"
)

// report adds the overload's figures and its invariants to the checker's report.
func (ov *overload) report(r *report) {
	r.invariants = append(r.invariants, invariant{name: invOverloadRSS}, invariant{name: invOverloadDrain})
	var b strings.Builder
	fmt.Fprintf(&b, "overload (producers at %dx the drain rate for %v, no faults)\n", overloadFactor, ov.dur)
	fmt.Fprintf(&b, "  drain rate (calibration, %d jobs of %d ms)  %.0f jobs/s\n", overloadCalibration, overloadWorkMs, ov.drainRate)
	fmt.Fprintf(&b, "  enqueue rate: target %.0f/s, achieved %.0f/s (%d enqueues)\n", ov.target, float64(ov.enqueued)/ov.enqSpan.Seconds(), ov.enqueued)
	var all []time.Duration
	for i, w := range ov.lat {
		all = append(all, w...)
		slices.Sort(w)
		if len(w) > 0 && (i == 0 || i == len(ov.lat)-1 || len(ov.lat) <= 8) {
			fmt.Fprintf(&b, "  enqueue latency %3ds-%3ds  n=%-6d p50 %v  p99 %v  max %v\n", i*10, (i+1)*10, len(w),
				pct(w, 50).Round(100*time.Microsecond), pct(w, 99).Round(100*time.Microsecond), w[len(w)-1].Round(100*time.Microsecond))
		}
	}
	slices.Sort(all)
	if len(all) > 0 {
		fmt.Fprintf(&b, "  enqueue latency, all      n=%-6d p50 %v  p99 %v  max %v\n", len(all),
			pct(all, 50).Round(100*time.Microsecond), pct(all, 99).Round(100*time.Microsecond), all[len(all)-1].Round(100*time.Microsecond))
	}
	for msg, n := range ov.errs {
		fmt.Fprintf(&b, "  enqueue errors: %d x %s\n", n, msg)
	}
	fmt.Fprintf(&b, "  backlog: peak %d, %d when producers stopped; drained in %v (%.0f jobs/s, %.0f%% of calibration)\n",
		ov.backlogPeak, ov.backlogEnd, ov.drainTime.Round(time.Millisecond), ov.afterRate, 100*ov.afterRate/max(ov.drainRate, 1))
	var slots []int
	for s := range ov.rss {
		slots = append(slots, s)
	}
	slices.Sort(slots)
	for _, s := range slots {
		xs := ov.rss[s]
		h := min(ov.rssHalf, len(xs))
		if h == 0 || h == len(xs) {
			continue
		}
		p1, p2 := slices.Max(xs[:h]), slices.Max(xs[h:])
		fmt.Fprintf(&b, "  worker %d VmRSS: first %d MiB, 1st-half peak %d MiB, 2nd-half and drain peak %d MiB, last %d MiB (%d samples)\n",
			s, xs[0]/1024, p1/1024, p2/1024, xs[len(xs)-1]/1024, len(xs))
		if float64(p2) > 1.25*float64(p1)+16*1024 {
			r.fail(invOverloadRSS, "worker %d: VmRSS peak %d MiB in the second half, %d MiB in the first", s, p2/1024, p1/1024)
		}
	}
	if ov.backlogEnd > 0 && ov.afterRate < ov.drainRate/2 {
		r.fail(invOverloadDrain, "drained at %.0f jobs/s, calibrated %.0f", ov.afterRate, ov.drainRate)
	}
	r.extra = b.String()
}
