package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Scenario 13: the durable event stream (venturi only; River has no such stream).
//
// Scenario 4's end-to-end run (N no-op jobs, one worker process with venturi.Config{}),
// twice per repetition in alternating order: "events-off", the jobs as scenario 4 enqueues
// them, and "events-on", the same jobs opted in to the stream (their events column set
// after the bulk enqueue, untimed, so the enqueue's own event row is not in it: the run
// measures what a worker pays, a started and a completed event per job, each with its row
// and the NOTIFY of its transaction). events-off must not regress against scenario 4 before
// the change (the trigger's WHEN test is all a job that did not opt in pays); events-on is
// reported. Throughput is jobs durably completed per second; CPU is the worker process's
// and PostgreSQL's backends', per 1,000 jobs.

// eventsReport is scenario 13's table.
type eventsReport struct {
	n    int
	tput map[string][]float64
	cpuW map[string][]float64
	cpuD map[string][]float64
	rows map[string][]int64 // event rows written per run
}

const (
	eventsOff = "events-off"
	eventsOn  = "events-on"
)

func (b *bencher) scenarioEvents(ctx context.Context) error {
	n := b.o.sz.e2eJobs
	rep := &eventsReport{n: n, tput: map[string][]float64{}, cpuW: map[string][]float64{}, cpuD: map[string][]float64{}, rows: map[string][]int64{}}
	b.rep.events = rep
	for r := range b.o.reps {
		variants := []string{eventsOff, eventsOn}
		if r%2 == 1 {
			variants[0], variants[1] = variants[1], variants[0]
		}
		for _, v := range variants {
			if err := resetJobs(ctx, b.admin); err != nil {
				return err
			}
			if _, err := b.admin.Exec(ctx, "TRUNCATE "+venturiSchema+".venturi_event"); err != nil {
				return err
			}
			if err := b.enqueueBulk(ctx, libVenturi, n); err != nil {
				return err
			}
			if v == eventsOn {
				if _, err := b.admin.Exec(ctx, "UPDATE "+venturiSchema+".venturi_job SET events = true"); err != nil {
					return err
				}
			}
			if err := b.settle(ctx, libVenturi); err != nil {
				return err
			}
			el, _, cpu, err := b.workUntilCPU(ctx, libVenturi, "", b.allDone(libVenturi, kindNoop, n))
			if err != nil {
				return err
			}
			done, err := completedCount(ctx, b.admin, libVenturi, kindNoop)
			if err != nil {
				return err
			}
			if done != int64(n) {
				return fmt.Errorf("%s: %d of %d jobs completed", v, done, n)
			}
			var rows int64
			if err := b.admin.QueryRow(ctx, "SELECT count(*) FROM "+venturiSchema+".venturi_event").Scan(&rows); err != nil {
				return err
			}
			if v == eventsOn && rows < 2*int64(n) || v == eventsOff && rows != 0 {
				return fmt.Errorf("%s: %d event rows for %d jobs", v, rows, n)
			}
			jps := float64(n) / el.Seconds()
			logf("  13. events %s rep %d: %.0f jobs/s (%v), %d event rows", v, r, jps, el.Round(time.Millisecond), rows)
			rep.tput[v] = append(rep.tput[v], jps)
			rep.rows[v] = append(rep.rows[v], rows)
			if cpu.ok {
				logf("  13. events %s rep %d: CPU worker %v, PostgreSQL backends %v", v, r, cpu.worker, cpu.db)
				rep.cpuW[v] = append(rep.cpuW[v], float64(cpu.worker.Milliseconds())*1000/float64(n))
				rep.cpuD[v] = append(rep.cpuD[v], float64(cpu.db.Milliseconds())*1000/float64(n))
			}
		}
	}
	return nil
}

func (e *eventsReport) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 13: the durable event stream (end-to-end, %d jobs, 1 worker process)\n\n", e.n)
	fmt.Fprintf(b, "| Metric | events-off | events-on | on/off |\n|---|---|---|---|\n")
	ratio := func(m map[string][]float64) string {
		off, on := median(m[eventsOff]), median(m[eventsOn])
		if off == 0 || len(m[eventsOn]) == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", on/off)
	}
	fmt.Fprintf(b, "| jobs/s (durably completed) | %s | %s | %s |\n", cell(e.tput[eventsOff]), cell(e.tput[eventsOn]), ratio(e.tput))
	fmt.Fprintf(b, "| worker CPU ms per 1k jobs | %s | %s | %s |\n", cell(e.cpuW[eventsOff]), cell(e.cpuW[eventsOn]), ratio(e.cpuW))
	fmt.Fprintf(b, "| PostgreSQL backend CPU ms per 1k jobs | %s | %s | %s |\n", cell(e.cpuD[eventsOff]), cell(e.cpuD[eventsOn]), ratio(e.cpuD))
	fmt.Fprintf(b, "\nevents-on writes a started and a completed event row per job (and a NOTIFY per finish batch and claim); events-off must match scenario 4 before migration 10.\n")
}
