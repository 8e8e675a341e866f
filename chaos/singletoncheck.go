package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

const invSingleton = "singleton: at most one live job, runs never overlap"

// singletonRun is one ended run of the singleton, from its journal entry.
type singletonRun struct {
	job   string
	entry venturi.JournalEntry
}

// singletonViolations checks the singleton's ended runs (of all its jobs): no two overlap
// by the journal's times ([started_at, at]; a run that ends when another starts does not
// overlap it), and no (job, run number) ends twice. It returns one line per violation.
func singletonViolations(runs []singletonRun) []string {
	var bad []string
	seen := map[string]bool{}
	for _, r := range runs {
		k := fmt.Sprintf("%s/%d", r.job, r.entry.Run)
		if seen[k] {
			bad = append(bad, fmt.Sprintf("singleton job %s run %d ended twice", r.job, r.entry.Run))
		}
		seen[k] = true
	}
	sorted := append([]singletonRun(nil), runs...)
	sort.SliceStable(sorted, func(i, k int) bool { return sorted[i].entry.StartedAt.Before(sorted[k].entry.StartedAt) })
	var last *singletonRun // the run that ends last among those started so far
	for i := range sorted {
		r := &sorted[i]
		if last != nil && r.entry.StartedAt.Before(last.entry.At) {
			bad = append(bad, fmt.Sprintf("singleton runs overlap: job %s run %d (%s, %s..%s) and job %s run %d (%s, %s..%s)",
				last.job, last.entry.Run, last.entry.Worker, ts(last.entry.StartedAt), ts(last.entry.At),
				r.job, r.entry.Run, r.entry.Worker, ts(r.entry.StartedAt), ts(r.entry.At)))
		}
		if last == nil || r.entry.At.After(last.entry.At) {
			last = r
		}
	}
	return bad
}

func ts(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// checkSingleton loads the singleton's jobs and journals and checks its invariant; it sets
// r.singleton to the summary line.
func (r *report) checkSingleton(ctx context.Context, pool *pgxpool.Pool) error {
	r.invariants = append(r.invariants, invariant{name: invSingleton})
	rows, err := pool.Query(ctx, `SELECT id, state::text, journal FROM venturi_job_all WHERE kind = $1 ORDER BY id`, singletonKind)
	if err != nil {
		return err
	}
	type job struct {
		id      pgtype.UUID
		state   string
		journal []venturi.JournalEntry
	}
	var jobs []*job
	for rows.Next() {
		var j job
		var b []byte
		if err := rows.Scan(&j.id, &j.state, &b); err != nil {
			return err
		}
		if err := json.Unmarshal(b, &j.journal); err != nil {
			return fmt.Errorf("journal of the singleton: %w", err)
		}
		jobs = append(jobs, &j)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var runs []singletonRun
	live, abandoned, handovers := 0, 0, 0
	owners := map[string]bool{}
	var worstTakeover time.Duration
	for _, j := range jobs {
		var moved []venturi.JournalEntry
		mrows, err := pool.Query(ctx, `SELECT entry FROM venturi_journal WHERE job_id = $1 ORDER BY seq`, j.id)
		if err != nil {
			return err
		}
		for mrows.Next() {
			var b []byte
			var en venturi.JournalEntry
			if err := mrows.Scan(&b); err != nil {
				return err
			}
			if err := json.Unmarshal(b, &en); err != nil {
				return err
			}
			moved = append(moved, en)
		}
		if err := mrows.Err(); err != nil {
			return err
		}
		entries := append(moved, j.journal...)
		id := fmt.Sprintf("%x", j.id.Bytes)
		for i, en := range entries {
			if en.Event == venturi.EventMerged || en.StartedAt.IsZero() {
				continue
			}
			runs = append(runs, singletonRun{job: id, entry: en})
			owners[en.Worker] = true
			switch en.Event {
			case venturi.EventAbandoned:
				abandoned++
				if i+1 < len(entries) && !entries[i+1].StartedAt.IsZero() {
					worstTakeover = max(worstTakeover, entries[i+1].StartedAt.Sub(en.At))
				}
			case venturi.EventPaused, venturi.EventInterrupted:
				handovers++
			}
		}
		switch j.state {
		case "completed", "dead", "cancelled":
		default:
			live++
		}
	}
	if len(jobs) == 0 {
		r.fail(invSingleton, "no singleton job: no worker ensured it")
	}
	if live > 1 {
		r.fail(invSingleton, "%d live singleton jobs", live)
	}
	// A RestartAlways service never ends, and a takeover is not a failure: however many
	// workers die under it, its one job lives on (an ended one would have been replaced
	// by a new job at the next Start).
	for _, j := range jobs {
		if j.state == "completed" || j.state == "dead" {
			r.fail(invSingleton, "singleton job %x ended %s (a takeover or a failure ended a RestartAlways service)", j.id.Bytes, j.state)
		}
	}
	if len(runs) == 0 {
		r.fail(invSingleton, "the singleton never ran")
	}
	for _, v := range singletonViolations(runs) {
		r.fail(invSingleton, "%s", v)
	}
	r.singleton = fmt.Sprintf("singleton: %d job(s), %d live; %d runs on %d workers, %d abandoned (longest rescue -> next start %v), %d handovers (paused/interrupted)",
		len(jobs), live, len(runs), len(owners), abandoned, worstTakeover.Round(time.Millisecond), handovers)
	return nil
}
