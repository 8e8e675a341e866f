package venturi

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// TestCombineSampleKeepsCountsAndRates: the finished counts carry over from the previous
// sample plus what finished in the window (or come from a recount); the rates are the
// window's per second; FailedPerSec is the growth of the unfinished jobs' failures plus
// those that left with finished jobs, less the deaths; jobs finishing inside the commit
// margin count as unfinished; empty lines are dropped.
func TestCombineSampleKeepsCountsAndRates(t *testing.T) {
	t.Parallel()
	old := []*dbsqlc.StatsKindsRow{
		{Queue: "q", Kind: "a", Completed: 100, Dead: 5, Cancelled: 1, PendingFailures: 10},
		{Queue: "q", Kind: "gone"}, // nothing left: dropped
	}
	due := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pending := []*dbsqlc.StatsPendingRow{
		{Queue: "q", Kind: "a", State: "available", Jobs: 3, Failures: 4, Oldest: due},
		{Queue: "q", Kind: "a", State: "scheduled", Jobs: 2, Failures: 6, Oldest: due.Add(-time.Hour)}, // not an available job
		{Queue: "q", Kind: "a", State: "running", Jobs: 1, Failures: 1},
	}
	window := []*dbsqlc.StatsFinishedRow{
		{Queue: "q", Kind: "a", State: "completed", Jobs: 20, Failures: 4},
		{Queue: "q", Kind: "a", State: "dead", Jobs: 2, Failures: 50},
		{Queue: "q", Kind: "a", State: "completed", Jobs: 1, Failures: 3, Recent: true},
		{Queue: "q", Kind: "a", State: "dead", Jobs: 1, Failures: 25, Recent: true},
	}
	lines := combineSample(old, pending, window, nil, false, 2)
	if len(lines) != 1 {
		t.Fatalf("lines %v", lines)
	}
	l := lines[statsKey{"q", "a"}]
	if l.counts != (statsCounts{3, 1, 2, 0, 120, 7, 1}) || l.oldest == nil || !l.oldest.Equal(due) {
		t.Fatalf("line %+v", l)
	}
	// Unfinished failures: 4+6+1 = 11, plus the recent ones (3 + 25 - 1) = 38; previous 10.
	// Failed: 38 - 10 + (4 + 50) - 2 = 80 over 2 seconds.
	if l.pendingFailures != 38 || l.cps != 10 || l.dps != 1 || l.fps != 40 {
		t.Fatalf("rates %+v", l)
	}
	// A recount replaces the carried finished counts; no window, no rates.
	recount := []*dbsqlc.StatsFinishedRow{{Queue: "q", Kind: "a", State: "completed", Jobs: 90}}
	l = combineSample(old, pending, nil, recount, true, 0)[statsKey{"q", "a"}]
	if l.counts != (statsCounts{3, 1, 2, 0, 90, 0, 0}) || l.cps != 0 || l.fps != 0 {
		t.Fatalf("recounted line %+v", l)
	}
	// Failures that shrink (a retry forgot them) give no negative rate.
	l = combineSample([]*dbsqlc.StatsKindsRow{{Queue: "q", Kind: "a", PendingFailures: 500}}, pending, nil, nil, false, 1)[statsKey{"q", "a"}]
	if l.fps != 0 {
		t.Fatalf("negative failures: %+v", l)
	}
}

func TestStretchedKeepsTheSamplerUnderItsShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ every, cost, want time.Duration }{
		{5 * time.Second, 10 * time.Millisecond, 5 * time.Second},
		{5 * time.Second, time.Second, 20 * time.Second},
		{statsRecountEvery, time.Minute, 20 * time.Minute},
	} {
		if got := stretched(tc.every, tc.cost); got != tc.want {
			t.Errorf("stretched(%v, %v) = %v, want %v", tc.every, tc.cost, got, tc.want)
		}
	}
}

func TestListErrorNamesTheTimeout(t *testing.T) {
	t.Parallel()
	timeout := fmt.Errorf("list: %w", &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"})
	if err := listError(timeout); !errors.Is(err, ErrListTimeout) {
		t.Fatalf("listError(timeout) = %v", err)
	}
	other := &pgconn.PgError{Code: "22P02"}
	if err := listError(other); err != other {
		t.Fatalf("listError(other) = %v", err)
	}
	if listError(nil) != nil {
		t.Fatal("listError(nil) is not nil")
	}
}

// TestCutTextBoundsAuditValues: actors, reasons and targets are cut on a UTF-8 boundary and
// marked, and cleaned of NUL.
func TestCutTextBoundsAuditValues(t *testing.T) {
	t.Parallel()
	if got := cutText("ééé", 5); got != "é…" {
		t.Fatalf("cutText = %q", got)
	}
	if got := cutText("a\x00b", 10); got != "ab" {
		t.Fatalf("cutText = %q", got)
	}
}

// TestCountMatchingJobsFilterIsListJobsFilter: sqlc has no way to share SQL between
// statements, so CountMatchingJobs (a bulk dry run) repeats ListJobs' filter: its WHERE
// lines and its hit column as a predicate. The two must stay alike, or a dry run would
// count other jobs than the action walks.
func TestCountMatchingJobsFilterIsListJobsFilter(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("internal/dbsqlc/queries/listing.sql")
	if err != nil {
		t.Fatal(err)
	}
	stmt := func(name string) string {
		s := string(b)
		i := strings.Index(s, "-- name: "+name+" ")
		if i < 0 {
			t.Fatalf("no statement %s", name)
		}
		s = s[i+1:]
		if j := strings.Index(s, "-- name: "); j >= 0 {
			s = s[:j]
		}
		return s
	}
	between := func(s, from, to string) string {
		t.Helper()
		i := strings.Index(s, from)
		j := strings.Index(s[i+1:], to)
		if i < 0 || j < 0 {
			t.Fatalf("%q ... %q not found in\n%s", from, to, s)
		}
		return strings.Join(strings.Fields(s[i:i+1+j]), " ")
	}
	list, count := stmt("ListJobs"), stmt("CountMatchingJobs")
	where := "WHERE (cardinality(@ids::uuid[])"
	if a, b := between(list, where, "\n)\nSELECT"), between(count, "(cardinality(@ids::uuid[])", "\n      AND\n"); a != "WHERE "+b {
		t.Errorf("the WHERE of ListJobs' m and CountMatchingJobs differ:\n%s\n%s", a, b)
	}
	hit := "((@key_search::text = ''"
	if a, b := between(list, hit, ") AS hit"), between(count, hit, "\n    LIMIT @max"); a+" )" != b {
		t.Errorf("ListJobs' hit and CountMatchingJobs' predicate differ:\n%s\n%s", a, b)
	}
}
