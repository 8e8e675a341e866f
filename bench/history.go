package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Scenario 9: a job's cost must not grow with its history. Jobs that pause for zero
// (each run appends one journal entry) run Until times each; the handler notes the time
// of chosen runs, from which the runs/s in windows of historyWindow runs come: at run
// 100, 1,000, 10,000, ... and just before the last. A sampler reads the rows' size and
// the journal's moved entries meanwhile. Cases: one job alone, and historyJobs jobs at
// once. River has no pause (a snooze is the nearest, and its attempt history is
// rewritten the same way), so this scenario measures venturi alone, against its own
// start.

const (
	kindHistory   = "bench_history"
	historyWindow = 2_000
)

// HistoryTask pauses until it has run Until times.
type HistoryTask struct {
	Until int `json:"until"`
}

// Kind names the task.
func (HistoryTask) Kind() string { return kindHistory }

// Handle notes the run's time when it is a mark, and pauses for zero until the last run.
func (t HistoryTask) Handle(ctx context.Context, run *venturi.Run[struct{}], s *historyState) (venturi.Outcome, error) {
	n := run.RunCount()
	if s.marks[n] {
		s.note(run.ID(), n)
	}
	if n >= t.Until {
		return venturi.Completed(), nil
	}
	return venturi.PauseIn(0), nil
}

// historyState collects the times of the marked runs of every job.
type historyState struct {
	marks map[int]bool
	mu    sync.Mutex
	at    map[ulid.ULID]map[int]time.Time
}

func (s *historyState) note(id ulid.ULID, n int) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at[id] == nil {
		s.at[id] = map[int]time.Time{}
	}
	s.at[id][n] = now
}

// historyWindows are the first runs of the measured windows, for jobs that run until.
func historyWindows(until int) []int {
	var out []int
	for _, w := range []int{100, 1_000, 10_000, 50_000} {
		if w == 100 || w == 1_000 || w+historyWindow < until-historyWindow {
			out = append(out, w)
		}
	}
	return append(out, until-historyWindow)
}

// historySample is one reading of the sampler.
type historySample struct {
	minRuns, maxRuns int
	rowBytes         int   // the largest job row, pg_column_size
	recent           int   // the most entries in one row's journal
	moved            int64 // entries moved out of the rows (kept in venturi_journal or dropped)
	kept             int64 // rows in venturi_journal
}

func (b *bencher) scenarioHistory(ctx context.Context) error {
	var lines []string
	lines = append(lines, fmt.Sprintf("Jobs return `PauseIn(0)` until their last run (each run appends one journal entry); "+
		"runs/s over windows of %d runs starting at the run named (the last window ends at the last run), from the handler's clock. "+
		"Worker with `venturi.Config{}`, in the bench process.", historyWindow))
	lines = append(lines, "")
	lines = append(lines, "| Case | runs/s at run 100 | at run 1,000 | in between | over the last window | last/first | Target | Met | largest row at run ~100 | largest row at the end | most entries in a row | entries moved out of the rows / kept in venturi_journal at the end | took |")
	lines = append(lines, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range []struct{ jobs, until int }{{1, b.o.historyRuns}, {b.o.historyJobs, b.o.historyParallelRuns}} {
		line, err := b.historyCase(ctx, c.jobs, c.until)
		if err != nil {
			return err
		}
		lines = append(lines, line)
	}
	b.rep.history = lines
	return nil
}

// historyCase runs jobs jobs to until runs each and returns its table line.
func (b *bencher) historyCase(ctx context.Context, jobs, until int) (string, error) {
	if err := resetJobs(ctx, b.admin); err != nil {
		return "", err
	}
	if _, err := b.admin.Exec(ctx, "DO $$ BEGIN IF to_regclass('"+venturiSchema+".venturi_journal') IS NOT NULL THEN TRUNCATE "+venturiSchema+".venturi_journal; END IF; END $$"); err != nil {
		return "", err
	}
	windows := historyWindows(until)
	s := &historyState{marks: map[int]bool{}, at: map[ulid.ULID]map[int]time.Time{}}
	for _, w := range windows {
		s.marks[w], s.marks[w+historyWindow] = true, true
	}
	pool, err := poolFor(ctx, b.o.url, venturiSchema, 0)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	w, err := venturi.NewWorker(pool, s, venturi.Config{Logger: quietLogger()})
	if err != nil {
		return "", err
	}
	venturi.MustRegister[HistoryTask](w)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	tasks := make([]venturi.Task, jobs)
	for i := range tasks {
		tasks[i] = HistoryTask{Until: until}
	}
	if _, err := q.EnqueueMany(ctx, tasks); err != nil {
		return "", err
	}
	started := time.Now()
	if err := w.Start(ctx); err != nil {
		return "", err
	}
	defer w.Stop(context.Background())
	var samples []historySample
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
		x, err := b.historySample(ctx)
		if err != nil {
			return "", err
		}
		samples = append(samples, x)
		logf("history: %d job(s), runs %d–%d, largest row %d B, moved entries %d, kept %d", jobs, x.minRuns, x.maxRuns, x.rowBytes, x.moved, x.kept)
		if x.minRuns >= until {
			break
		}
	}
	took := time.Since(started)
	if err := w.Stop(ctx); err != nil {
		return "", err
	}
	// Per window: each job's runs/s over the window, summed over the jobs (they run at once).
	rates := make([]float64, len(windows))
	for i, win := range windows {
		for id, at := range s.at {
			t0, ok0 := at[win]
			t1, ok1 := at[win+historyWindow]
			if !ok0 || !ok1 || !t1.After(t0) {
				return "", fmt.Errorf("job %s lacks the times of runs %d and %d", id, win, win+historyWindow)
			}
			rates[i] += historyWindow / t1.Sub(t0).Seconds()
		}
	}
	ratio := rates[len(rates)-1] / rates[0]
	met := "✗"
	if ratio >= 0.9 {
		met = "✓"
	}
	early := samples[0]
	for _, x := range samples {
		if x.maxRuns >= 100 {
			early = x
			break
		}
	}
	last := samples[len(samples)-1]
	mostRecent := slices.MaxFunc(samples, func(a, b historySample) int { return a.recent - b.recent }).recent
	name := "1 job"
	if jobs > 1 {
		name = fmt.Sprintf("%d jobs at once (runs/s summed)", jobs)
	}
	var mid []string
	for i := 2; i < len(rates)-1; i++ {
		mid = append(mid, fmt.Sprintf("%.0f at run %d", rates[i], windows[i]))
	}
	if len(mid) == 0 {
		mid = []string{"—"}
	}
	return fmt.Sprintf("| %s, %d runs each | %.0f | %.0f | %s | %.0f (from run %d) | %.2f | >= 0.9 | %s | %d B | %d B | %d | %d / %d | %s |", name, until,
		rates[0], rates[1], strings.Join(mid, ", "), rates[len(rates)-1], windows[len(windows)-1], ratio, met,
		early.rowBytes, last.rowBytes, mostRecent, last.moved, last.kept, took.Round(time.Second)), nil
}

// historySample reads the scenario's rows: run counts, the largest row, the most entries
// in a row's journal, and the entries moved out of the rows (0 before schema version 3).
func (b *bencher) historySample(ctx context.Context) (historySample, error) {
	var (
		x          historySample
		hasJournal bool
	)
	// journal_moved read through to_jsonb: the column does not exist before schema 3.
	if err := b.admin.QueryRow(ctx, `SELECT COALESCE(min(runs), 0), COALESCE(max(runs), 0),
		COALESCE(max(pg_column_size(j.*)), 0), COALESCE(max(jsonb_array_length(journal)), 0),
		COALESCE(sum((to_jsonb(j)->>'journal_moved')::bigint), 0)::bigint, to_regclass($2) IS NOT NULL
		FROM `+venturiSchema+`.venturi_job_all j WHERE kind = $1`, kindHistory, venturiSchema+".venturi_journal").Scan(
		&x.minRuns, &x.maxRuns, &x.rowBytes, &x.recent, &x.moved, &hasJournal); err != nil {
		return x, err
	}
	if !hasJournal {
		return x, nil
	}
	err := b.admin.QueryRow(ctx, `SELECT count(*) FROM `+venturiSchema+`.venturi_journal`).Scan(&x.kept)
	return x, err
}

// historyMarkdown writes scenario 9's section.
func (r *report) historyMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Scenario 9: a job's history (venturi)\n\n")
	for _, l := range r.history {
		fmt.Fprintln(b, l)
	}
	fmt.Fprintln(b)
	fmt.Fprintln(b, "- \"largest row\" is `pg_column_size` of the biggest job row (its journal holds the recent entries);"+
		" entries moved out of the rows go to `venturi_journal` (schema 3), which keeps at most 1,000 per job and summarizes the older ones.")
}
