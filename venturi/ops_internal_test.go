package venturi

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/venturi-dev/venturi/internal/maintenance"
)

// TestStatsStatesAreTheSamplersOrder: the sampler (maintenance.StatsStates) writes its
// counts in the order that Queue.Stats reads them back through statsStates.
func TestStatsStatesAreTheSamplersOrder(t *testing.T) {
	t.Parallel()
	if len(statsStates) != len(maintenance.StatsStates) {
		t.Fatalf("statsStates %v, maintenance.StatsStates %v", statsStates, maintenance.StatsStates)
	}
	for i, s := range statsStates {
		if string(s) != maintenance.StatsStates[i] {
			t.Errorf("state %d: statsStates %q, maintenance.StatsStates %q", i, s, maintenance.StatsStates[i])
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
