package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"
)

// The completion ledger: out of band, outside the database, every worker appends a line
// for each transactional completion or pause whose COMMIT returned success (the job, the
// run, its token, the outcome). What the ledger holds was acknowledged to the worker, so
// the database must hold it too: a line whose effect row is missing is an acknowledged
// commit that the database lost (an asynchronous replica promoted before it received it).
// One file per worker slot (its successive processes append to it), in the log directory.

// ledger is a worker's append-only ledger file; a nil ledger records nothing.
type ledger struct {
	mu sync.Mutex
	f  *os.File
}

func openLedger(path string) (*ledger, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the completion ledger: %w", err)
	}
	return &ledger{f: f}, nil
}

// record appends one acknowledged commit, in one write: a process killed after it keeps
// the line (it is in the kernel's page cache), one killed before it never had its commit
// on record, which can only make the ledger hold less than what was acknowledged.
func (l *ledger) record(id ulid.ULID, run int, token int64, outcome string) {
	if l == nil {
		return
	}
	line := fmt.Sprintf("%s %d %d %s\n", id, run, token, outcome)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.WriteString(line)
}

func ledgerPath(logdir string, slot int) string {
	return filepath.Join(logdir, fmt.Sprintf("ledger-%d.log", slot))
}

// ledgerEntry is one line of a ledger.
type ledgerEntry struct {
	job     [16]byte
	run     int
	token   int64
	outcome string
}

// readLedgers reads every worker's ledger in logdir. A last line without its newline (a
// write cut short) is skipped and counted.
func readLedgers(logdir string) (entries []ledgerEntry, torn int, err error) {
	files, err := filepath.Glob(filepath.Join(logdir, "ledger-*.log"))
	if err != nil {
		return nil, 0, err
	}
	sort.Strings(files)
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, 0, err
		}
		es, t, err := parseLedger(string(b))
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		entries = append(entries, es...)
		torn += t
	}
	return entries, torn, nil
}

func parseLedger(s string) (entries []ledgerEntry, torn int, err error) {
	sc := bufio.NewScanner(strings.NewReader(s))
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		var id string
		var e ledgerEntry
		if _, err := fmt.Sscanf(line, "%s %d %d %s", &id, &e.run, &e.token, &e.outcome); err != nil {
			if !strings.HasSuffix(s, "\n") && strings.HasSuffix(s, line) {
				torn++
				continue
			}
			return nil, 0, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		u, err := ulid.ParseStrict(id)
		if err != nil {
			return nil, 0, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		e.job = u
		entries = append(entries, e)
	}
	return entries, torn, sc.Err()
}

// ledgerStats is what the ledger check found.
type ledgerStats struct {
	entries     int
	torn        int
	completions int
	lost        int // acknowledged commits whose effect the database does not hold
	lostDone    int // of those, completions
	redone      int // lost completions whose job a later run completed again
	unrecorded  int // effects in the database with no ledger line (killed between commit and write)
	lostSamples []string
}

const (
	invLedger     = "every acknowledged completion and pause is in the database (ledger)"
	invLedgerOnce = "no job completed twice by acknowledged commits (ledger)"
)

// checkLedger holds the database to the ledger: each line's effect row (same job, run,
// token and outcome) must exist, and no job may have two acknowledged completions. With
// lossy set (an asynchronous failover), losses are the run's measured figure instead: a
// lost completion is re-done by a later run, and only completions that both survived may
// not be two.
func checkLedger(entries []ledgerEntry, effects map[[16]byte][]effectRow, lossy bool) (st ledgerStats, violations []string) {
	st.entries = len(entries)
	type key struct {
		run     int
		token   int64
		outcome string
	}
	seen := map[[16]byte]map[key]bool{}
	done := map[[16]byte][]ledgerEntry{}
	for _, e := range entries {
		if seen[e.job] == nil {
			seen[e.job] = map[key]bool{}
		}
		seen[e.job][key{e.run, e.token, e.outcome}] = true
		if e.outcome == "completed" {
			st.completions++
			done[e.job] = append(done[e.job], e)
		}
		found := false
		for _, ef := range effects[e.job] {
			found = found || (ef.run == e.run && ef.token == e.token && ef.outcome == e.outcome)
		}
		if found {
			continue
		}
		st.lost++
		if e.outcome == "completed" {
			st.lostDone++
			for _, ef := range effects[e.job] {
				if ef.outcome == "completed" && ef.token != e.token {
					st.redone++
					break
				}
			}
		}
		msg := fmt.Sprintf("job %s: the %s of run %d (token %d) was acknowledged, but the database has no such effect", ulidStr(e.job), e.outcome, e.run, e.token)
		if len(st.lostSamples) < 5 {
			st.lostSamples = append(st.lostSamples, msg)
		}
		if !lossy {
			violations = append(violations, invLedger+": "+msg)
		}
	}
	for job, ds := range done {
		surviving := 0
		for _, d := range ds {
			for _, ef := range effects[job] {
				if ef.run == d.run && ef.token == d.token && ef.outcome == "completed" {
					surviving++
					break
				}
			}
		}
		if surviving > 1 || (!lossy && len(ds) > 1) {
			violations = append(violations, fmt.Sprintf("%s: job %s has %d acknowledged completions (%d in the database)", invLedgerOnce, ulidStr(job), len(ds), surviving))
		}
	}
	for job, efs := range effects {
		for _, ef := range efs {
			if (ef.outcome == "completed" || ef.outcome == "paused") && !seen[job][key{ef.run, ef.token, ef.outcome}] {
				st.unrecorded++
			}
		}
	}
	return st, violations
}

func (st ledgerStats) String() string {
	s := fmt.Sprintf("ledger: %d acknowledged commits (%d completions) appended by the workers; lost by the database %d (completions %d, re-done by a later run %d); %d effects committed without a line (a kill between COMMIT and the append)",
		st.entries, st.completions, st.lost, st.lostDone, st.redone, st.unrecorded)
	if st.torn > 0 {
		s += fmt.Sprintf("; %d torn last lines skipped", st.torn)
	}
	for _, l := range st.lostSamples {
		s += "\n  lost: " + l
	}
	return s
}
