package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

const invCron = "cron: every scheduled fire enqueued exactly once"

// cronState is the schedule's row, as the checker reads it.
type cronState struct {
	created  time.Time // the database time of its creation (its first fire is the next second)
	nextFire time.Time
	lastFire time.Time // zero: none
	fires    int64
	skipped  int64
}

// cronFireRow is one row of the schedule's ledger.
type cronFireRow struct {
	at      time.Time
	job     [16]byte
	action  string
	covers  int
	skipped int
}

// cronViolations checks a per-second schedule's history: its ledger holds every second
// from the first one after the schedule's creation to its last fire, each exactly once,
// none coalesced or skipped (nothing is late past the grace in a chaos run), each with a
// job of its own (inserted, not kept); every job of the schedule's kind is one of those
// (no fire enqueued twice, no job without its fire); the schedule's counters and its
// last and next fire agree with the ledger. jobs maps each job of the kind to its count
// of rows (always 1 from the database; the test feeds more). It returns one line per
// violation.
func cronViolations(s cronState, fires []cronFireRow, jobs map[[16]byte]int) []string {
	var bad []string
	if len(fires) == 0 {
		return []string{"no fire in the ledger: no worker fired the schedule"}
	}
	first := s.created.Truncate(time.Second).Add(time.Second)
	if !fires[0].at.Equal(first) {
		bad = append(bad, fmt.Sprintf("first fire at %s, want %s (the second after the schedule's creation at %s)",
			ts(fires[0].at), ts(first), ts(s.created)))
	}
	used := map[[16]byte]time.Time{}
	for i, f := range fires {
		if i > 0 {
			switch d := f.at.Sub(fires[i-1].at); {
			case d <= 0:
				bad = append(bad, fmt.Sprintf("fire at %s recorded twice or out of order", ts(f.at)))
			case d != time.Second:
				bad = append(bad, fmt.Sprintf("%d fire times between %s and %s not enqueued", int(d/time.Second)-1,
					ts(fires[i-1].at), ts(f.at)))
			}
		}
		if f.action != "inserted" || f.covers != 1 || f.skipped != 0 {
			bad = append(bad, fmt.Sprintf("fire at %s: action %s, covers %d, skipped %d (want its own job)",
				ts(f.at), f.action, f.covers, f.skipped))
		}
		if at, ok := used[f.job]; ok {
			bad = append(bad, fmt.Sprintf("fires at %s and %s share job %x", ts(at), ts(f.at), f.job))
		}
		used[f.job] = f.at
		if jobs[f.job] == 0 {
			bad = append(bad, fmt.Sprintf("fire at %s: its job %x does not exist", ts(f.at), f.job))
		}
	}
	for id, n := range jobs {
		if _, ok := used[id]; !ok {
			bad = append(bad, fmt.Sprintf("job %x of the schedule's kind belongs to no fire (enqueued twice?)", id))
		}
		if n > 1 {
			bad = append(bad, fmt.Sprintf("job %x exists %d times", id, n))
		}
	}
	last := fires[len(fires)-1].at
	if !s.lastFire.Equal(last) || !s.nextFire.Equal(last.Add(time.Second)) || s.fires != int64(len(fires)) || s.skipped != 0 {
		bad = append(bad, fmt.Sprintf("schedule state: last fire %s, next %s, %d fires, %d skipped; the ledger: %d fires, last %s",
			ts(s.lastFire), ts(s.nextFire), s.fires, s.skipped, len(fires), ts(last)))
	}
	return bad
}

// checkCron loads the schedule, its ledger and its jobs and checks its invariant; it sets
// r.cron to the summary line.
func (r *report) checkCron(ctx context.Context, pool *pgxpool.Pool) error {
	r.invariants = append(r.invariants, invariant{name: invCron})
	var s cronState
	var last *time.Time
	err := pool.QueryRow(ctx, `SELECT created_at, next_fire, last_fire, fires, skipped FROM venturi_cron WHERE name = $1`,
		cronSchedule).Scan(&s.created, &s.nextFire, &last, &s.fires, &s.skipped)
	if errors.Is(err, pgx.ErrNoRows) {
		r.fail(invCron, "no schedule %s: no worker registered it", cronSchedule)
		r.cron = "cron: no schedule"
		return nil
	}
	if err != nil {
		return err
	}
	if last != nil {
		s.lastFire = *last
	}
	rows, err := pool.Query(ctx, `SELECT fire_at, job_id, action, covers, skipped FROM venturi_cron_fire
		WHERE schedule = $1 ORDER BY fire_at`, cronSchedule)
	if err != nil {
		return err
	}
	var fires []cronFireRow
	for rows.Next() {
		var f cronFireRow
		var id pgtype.UUID
		if err := rows.Scan(&f.at, &id, &f.action, &f.covers, &f.skipped); err != nil {
			return err
		}
		f.job = id.Bytes
		fires = append(fires, f)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `SELECT id, state::text FROM venturi_job_all WHERE kind = $1`, cronKind)
	if err != nil {
		return err
	}
	jobs := map[[16]byte]int{}
	states := map[string]int{}
	for rows.Next() {
		var id pgtype.UUID
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			return err
		}
		jobs[id.Bytes]++
		states[st]++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, v := range cronViolations(s, fires, jobs) {
		r.fail(invCron, "%s", v)
	}
	span := time.Duration(0)
	if len(fires) > 0 {
		span = fires[len(fires)-1].at.Sub(fires[0].at)
	}
	r.cron = fmt.Sprintf("cron: %d fires over %v, %d jobs (%d completed), registered by every worker start",
		len(fires), span, len(jobs), states["completed"])
	return nil
}
