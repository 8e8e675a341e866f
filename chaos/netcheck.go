package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// cut is a run ended by a fault while its handler ran: the job's next start measures
// the recovery.
type cut struct {
	fault   int
	job     [16]byte
	run     int
	rescued time.Time // the disturbed end's time (the rescue, for an abandoned run)
}

const invHalfOpen = "p99 half-open cut -> next start <= lease + 2s"

// checkHalfOpen measures the re-pickup of the runs a half-open cut took from its worker:
// from the cut to the next start of each job by another run (the worker that was cut
// off hears nothing until the heal, so the other workers must rescue its runs by lease
// expiry). Runs of flow-controlled jobs are left out, as for kills: their next start
// waits for their gate. The fencing of the cut worker (a completion or effect of a run
// that was rescued) is checked with every other run, by invStale and invOnce.
func (r *report) checkHalfOpen(cuts []cut, faults []faultRow, starts map[[16]byte][]startRow, cfg checkConfig) {
	n := 0
	for _, f := range faults {
		if f.kind == "half-open" {
			n++
		}
	}
	if n == 0 || cfg.control {
		return
	}
	r.invariants = append(r.invariants, invariant{name: invHalfOpen})
	for _, c := range cuts {
		f := faults[c.fault]
		var next time.Time
		for _, s := range starts[c.job] {
			if s.run > c.run && s.at.After(f.at) {
				next = s.at
				break
			}
		}
		if next.IsZero() {
			r.halfOpenNoNext++
			continue
		}
		// As for kills, the bound is checked on isolated cuts: a cut whose recovery
		// window meets a PostgreSQL restart or another fault measures that fault too.
		if !isolated(c, faults, starts, cfg) {
			r.halfOpenMixed++
			continue
		}
		r.halfOpenRec = append(r.halfOpenRec, next.Sub(f.at))
		if !c.rescued.IsZero() {
			r.halfOpenRescue = append(r.halfOpenRescue, c.rescued.Sub(f.at))
		}
	}
	slices.Sort(r.halfOpenRec)
	slices.Sort(r.halfOpenRescue)
	if p99 := pct(r.halfOpenRec, 99); len(r.halfOpenRec) > 0 && p99 > cfg.lease+2*time.Second {
		r.fail(invHalfOpen, "p99 %v > %v (n=%d, max %v)", p99.Round(time.Millisecond), cfg.lease+2*time.Second,
			len(r.halfOpenRec), r.halfOpenRec[len(r.halfOpenRec)-1].Round(time.Millisecond))
	}
}

func (r *report) printHalfOpen(w io.Writer) {
	if r.faults["half-open"] == 0 {
		return
	}
	k := r.halfOpenRec
	if len(k) == 0 {
		fmt.Fprintf(w, "  half-open cut -> next start of a job the cut worker ran: no isolated samples (%d compound, %d with no later start)\n",
			r.halfOpenMixed, r.halfOpenNoNext)
		return
	}
	fmt.Fprintf(w, "  half-open cut -> next start of a job the cut worker ran, isolated cuts (n=%d, bound %v; %d compound left out)\n",
		len(k), r.lease+2*time.Second, r.halfOpenMixed)
	fmt.Fprintf(w, "    p50 %v  p90 %v  p99 %v  max %v\n", pct(k, 50).Round(time.Millisecond), pct(k, 90).Round(time.Millisecond),
		pct(k, 99).Round(time.Millisecond), k[len(k)-1].Round(time.Millisecond))
	if b := r.halfOpenRescue; len(b) > 0 {
		fmt.Fprintf(w, "    %-20s p50 %v  p90 %v  p99 %v  max %v\n", "cut -> rescued", pct(b, 50).Round(time.Millisecond),
			pct(b, 90).Round(time.Millisecond), pct(b, 99).Round(time.Millisecond), b[len(b)-1].Round(time.Millisecond))
	}
	if r.halfOpenNoNext > 0 {
		fmt.Fprintf(w, "    (%d cut runs with no later start)\n", r.halfOpenNoNext)
	}
}
