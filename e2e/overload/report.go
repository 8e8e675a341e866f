package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

const (
	invLost       = "0 lost: every acknowledged create (2xx) ends with its bookmark fetched"
	invAnswered   = "every request answered within the client timeout (no transport error)"
	invRetryAfter = "every 429 and 503 carries a Retry-After"
	invStatus     = "no other status: 201, 429 or 503 only (no 5xx but 503)"
	invRSSAPI     = "api memory bounded (2nd-half peak <= 1.25 x 1st-half peak + 16 MiB)"
	invRSSWorker  = "worker memory bounded (2nd-half peak <= 1.25 x 1st-half peak + 16 MiB)"
	invDrain      = "backlog drained, at >= half the calibrated rate"
)

// verdict collects the invariants and their violations.
type verdict struct {
	names      []string
	bad        map[string]int
	violations []string
}

func newVerdict(names ...string) *verdict { return &verdict{names: names, bad: map[string]int{}} }

func (v *verdict) fail(inv, format string, a ...any) {
	v.bad[inv]++
	v.violations = append(v.violations, inv+": "+fmt.Sprintf(format, a...))
}

// pct is the p-th percentile of sorted durations (0 for none).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// latLine is "n=N p50 … p99 … max …" of ds (sorted in place).
func latLine(ds []time.Duration) string {
	if len(ds) == 0 {
		return "n=0"
	}
	slices.Sort(ds)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("n=%-6d p50 %-9v p99 %-9v max %v", len(ds), r(pct(ds, 50)), r(pct(ds, 99)), r(ds[len(ds)-1]))
}

// rssBounded checks a process's VmRSS samples (KiB): the peak after the first half
// samples may not exceed 1.25 x the first half's peak + 16 MiB. It returns both peaks
// and whether the check could be made (samples on both sides).
func rssBounded(xs []int64, half int) (p1, p2 int64, ok, checked bool) {
	h := min(half, len(xs))
	if h == 0 || h == len(xs) {
		return 0, 0, true, false
	}
	p1, p2 = slices.Max(xs[:h]), slices.Max(xs[h:])
	return p1, p2, float64(p2) <= 1.25*float64(p1)+16*1024, true
}

// report prints the run's figures and invariants, and returns whether every invariant
// holds. stopErrs are the processes' exits on SIGTERM that were not clean (a note).
func (r *ovRun) report(w io.Writer, stopErrs []string) bool {
	o := r.s.o
	v := newVerdict(invLost, invAnswered, invRetryAfter, invStatus, invRSSAPI, invRSSWorker, invDrain)
	line := strings.Repeat("-", 72)
	fmt.Fprintf(w, "\n%s\nbookmarks overload summary: producers at %gx the drain rate for %v through the API, %v in all\n%s\n",
		line, o.factor, o.dur, time.Since(r.s.started).Round(time.Second), line)

	fmt.Fprintf(w, "calibration (%d bookmarks over %d hosts, pages answering after %v, %d handlers)\n",
		r.calAcked, o.hosts, o.pageDelay, o.concurrency)
	fmt.Fprintf(w, "  drain rate %.1f fetches/s (10%%-90%% done in %v; the handlers' bound is %.0f/s)\n",
		r.drainRate, r.calSpan.Round(time.Millisecond), float64(o.concurrency)/o.pageDelay.Seconds())

	ts := r.tallies
	fmt.Fprintf(w, "producers\n")
	steadyAcked, greedyAcked := ts[gSteady].status[http.StatusCreated], ts[gGreedy].status[http.StatusCreated]
	span := r.enqSpan.Seconds()
	// A group's achieved rate runs from the overload's start to its last acknowledgement
	// (the retries after the window included).
	achieved := func(g group) (float64, time.Duration) {
		d := max(ts[g].lastAck.Sub(r.start), time.Second)
		return float64(ts[g].status[http.StatusCreated]) / d.Seconds(), d.Round(100 * time.Millisecond)
	}
	sr, sd := achieved(gSteady)
	gr, gd := achieved(gGreedy)
	fmt.Fprintf(w, "  steady: target %.1f/s over %d keys (%.0f%% of their %d/s each), achieved %.1f/s (%d acknowledged in %v; %d of %d permits dropped)\n",
		r.target, r.keysUsed, 100*r.target/float64(r.keysUsed*writeRate), writeRate, sr, steadyAcked, sd, r.dropped[gSteady], r.offered[gSteady])
	fmt.Fprintf(w, "  greedy key: offered %.0f/s (%gx its limit), achieved %.1f/s (%d acknowledged in %v; %d of %d permits dropped)\n",
		greedyKeyLoad*writeRate, greedyKeyLoad, gr, greedyAcked, gd, r.dropped[gGreedy], r.offered[gGreedy])
	fmt.Fprintf(w, "  both: %d acknowledged creates, %.1f/s from the overload's start to the last producer's end (%v, retries included)\n",
		steadyAcked+greedyAcked, float64(steadyAcked+greedyAcked)/span, r.enqSpan.Round(time.Second))
	if r.burstFired {
		fmt.Fprintf(w, "  burst (after the drain): %d creates at once on %d keys, %d acknowledged within %v (retries included)\n",
			o.burst, len(r.burst), r.burstAcked, r.burstSpan.Round(time.Millisecond))
	}

	fmt.Fprintf(w, "requests       %8s %8s %8s %8s %6s %8s %6s %8s %7s\n", "attempts", "201", "429", "503", "other", "timeouts", "errors", "retries", "gave up")
	for g, t := range ts {
		other, errs := 0, 0
		for st, n := range t.status {
			if st != http.StatusCreated && st != http.StatusTooManyRequests && st != http.StatusServiceUnavailable {
				other += n
				v.fail(invStatus, "%s: %d x status %d", groupNames[g], n, st)
			}
		}
		for msg, n := range t.errs {
			errs += n
			v.fail(invAnswered, "%s: %d x %s", groupNames[g], n, msg)
		}
		if t.timeouts > 0 {
			v.fail(invAnswered, "%s: %d requests not answered within %v", groupNames[g], t.timeouts, o.timeout)
		}
		for st, n := range t.noRetryAfter {
			v.fail(invRetryAfter, "%s: %d x %d without a usable Retry-After", groupNames[g], n, st)
		}
		fmt.Fprintf(w, "  %-12s %8d %8d %8d %8d %6d %8d %6d %8d %7d\n", groupNames[g], t.attempts, t.status[http.StatusCreated],
			t.status[http.StatusTooManyRequests], t.status[http.StatusServiceUnavailable], other, t.timeouts, errs, t.retries, t.gaveUp)
	}

	fmt.Fprintf(w, "create latency (answered attempts; the steady and greedy producers' by 10 s window)\n")
	var all []time.Duration
	for i, win := range r.windows {
		all = append(all, win.lat...)
		fmt.Fprintf(w, "  %4ds-%4ds   201: %s  429/503: %d\n", i*10, (i+1)*10, latLine(win.lat), win.refused)
	}
	fmt.Fprintf(w, "  overload, all 201: %s\n", latLine(all))
	var refused []time.Duration
	for _, g := range []group{gSteady, gGreedy} {
		refused = append(refused, ts[g].refusedLat...)
	}
	fmt.Fprintf(w, "  overload, 429/503 answers: %s\n", latLine(refused))
	fmt.Fprintf(w, "  first attempt to 201 (Retry-After waits included), steady: %s\n", latLine(ts[gSteady].e2eLat))
	fmt.Fprintf(w, "  first attempt to 201 (Retry-After waits included), greedy: %s\n", latLine(ts[gGreedy].e2eLat))
	fmt.Fprintf(w, "  client requests in flight during the overload: at most %d at once\n", slices.Max(append([]int64{0}, r.inflightMax...)))

	var every []string
	for i := 0; i < len(r.backlog); i += 10 {
		every = append(every, fmt.Sprint(r.backlog[i]))
	}
	fmt.Fprintf(w, "backlog (pending fetches): peak %d, %d when the producers were done\n", r.backlogPeak, r.backlogEnd)
	fmt.Fprintf(w, "  every 10 s from the overload's start: %s\n", strings.Join(every, " "))
	fmt.Fprintf(w, "  drained in %v: %.1f fetches/s, %.0f%% of calibration\n",
		r.drainTime.Round(time.Millisecond), r.afterRate, 100*r.afterRate/max(r.drainRate, 0.001))
	if !r.drained {
		v.fail(invDrain, "the backlog was not drained within %v", r.drainTime.Round(time.Second))
	} else if r.backlogEnd > 0 && r.afterRate < r.drainRate/2 {
		v.fail(invDrain, "drained at %.1f fetches/s, calibrated %.1f", r.afterRate, r.drainRate)
	}

	fmt.Fprintf(w, "memory (VmRSS once a second from the overload's start; first half: %d samples)\n", r.rssHalf)
	for i, inv := range []string{invRSSAPI, invRSSWorker} {
		name := []string{"api", "worker"}[i]
		xs := r.rss[i]
		p1, p2, ok, checked := rssBounded(xs, r.rssHalf)
		if !checked {
			v.fail(inv, "%s: %d samples, %d in the first half: no comparison", name, len(xs), r.rssHalf)
			continue
		}
		fmt.Fprintf(w, "  %-7s first %d MiB, 1st-half peak %d MiB, 2nd-half and drain peak %d MiB, last %d MiB (%d samples)\n",
			name, xs[0]/1024, p1/1024, p2/1024, xs[len(xs)-1]/1024, len(xs))
		if !ok {
			v.fail(inv, "%s: VmRSS peak %d MiB in the second half, %d MiB in the first", name, p2/1024, p1/1024)
		}
	}

	if r.burstFired {
		fmt.Fprintf(w, "burst (%d creates at once after the drain; not in the invariants above but the first four)\n", o.burst)
		fmt.Fprintf(w, "  201: %s\n", latLine(ts[gBurst].ackLat))
		fmt.Fprintf(w, "  429/503 answers: %s\n", latLine(ts[gBurst].refusedLat))
		fmt.Fprintf(w, "  first attempt to 201 (Retry-After waits included): %s\n", latLine(ts[gBurst].e2eLat))
		fmt.Fprintf(w, "  its backlog: %d when every create was answered, drained %v after the burst\n",
			r.burstBacklog, r.burstDrain.Round(time.Millisecond))
		for i, name := range []string{"api", "worker"} {
			if xs := r.burstRSS[i]; len(xs) > 0 {
				fmt.Fprintf(w, "  %-7s VmRSS before %d MiB, peak %d MiB, last %d MiB (%d samples)\n",
					name, xs[0]/1024, slices.Max(xs)/1024, xs[len(xs)-1]/1024, len(xs))
			}
		}
		if !r.burstDrained {
			v.fail(invLost, "the burst's backlog was not drained within %v", r.burstDrain.Round(time.Second))
		}
	}
	fmt.Fprintf(w, "pages served: %d (at most %d at once)\n", r.s.pages.served.Load(), r.s.pages.peak.Load())
	var sts []string
	for st, n := range r.final {
		sts = append(sts, fmt.Sprintf("%s %d", st, n))
	}
	slices.Sort(sts)
	fmt.Fprintf(w, "acknowledged bookmarks at the end: %d (%s; missing %d)\n", len(r.acked), strings.Join(sts, ", "), r.missing)
	if notFetched := len(r.acked) - r.final["fetched"]; notFetched > 0 {
		v.fail(invLost, "%d of %d acknowledged bookmarks not fetched (%s; missing %d)", notFetched, len(r.acked), strings.Join(sts, ", "), r.missing)
	}
	if len(stopErrs) > 0 {
		fmt.Fprintf(w, "note: %s\n", strings.Join(stopErrs, "; "))
	}

	fmt.Fprintf(w, "invariants\n")
	for _, n := range v.names {
		st := "ok"
		if v.bad[n] > 0 {
			st = fmt.Sprintf("VIOLATED (%d)", v.bad[n])
		}
		fmt.Fprintf(w, "  %-74s %s\n", n, st)
	}
	if len(v.violations) > 0 {
		fmt.Fprintf(w, "violations (%d):\n", len(v.violations))
		for i, x := range v.violations {
			if i == 40 {
				fmt.Fprintf(w, "  … %d more\n", len(v.violations)-40)
				break
			}
			fmt.Fprintf(w, "  %s\n", x)
		}
		fmt.Fprintf(w, "RESULT: FAIL\n")
		return false
	}
	fmt.Fprintf(w, "RESULT: PASS\n")
	return true
}
