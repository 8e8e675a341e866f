package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// TestSQLProduced feeds checkSQLProduced a clean history of the SQL producer (every path,
// every answer, a deferred merge, a failed call that committed anyway, a replaced key) and
// then each kind of violation, and requires each to be reported under its invariant.
func TestSQLProduced(t *testing.T) {
	mk, rk := SQLMerge{}.Kind(), SQLReplace{}.Kind()
	id := func(n byte) ulid.ULID { return ulid.ULID{15: n} }
	note := func(n byte) string { return "merged enqueue " + id(200+n).String() }
	// mk-0: s1 inserted job 1 and g2 merged into it (Go); s3 was deferred (answered job 1),
	// and job 1 started before a worker applied it, so it became job 2; m4 (in a batch) was
	// deferred behind s3 and merged into job 2. rk-0: g5 inserted job 3, s6 replaced it, m7
	// failed but committed (it replaced it again). rk-1: m8 inserted job 4.
	clean := func() ([]sqlCall, []sqlJob) {
		calls := []sqlCall{
			{via: viaSQL, acked: true, items: []sqlItem{{kind: mk, key: "mk-0", contrib: "s1", id: id(1), action: "inserted"}}},
			{via: viaGo, acked: true, items: []sqlItem{{kind: mk, key: "mk-0", contrib: "g2", id: id(1), action: "merged"}}},
			{via: viaSQL, acked: true, items: []sqlItem{{kind: mk, key: "mk-0", contrib: "s3", id: id(1), action: "deferred"}}},
			{via: viaMany, acked: true, items: []sqlItem{
				{kind: mk, key: "mk-0", contrib: "m4", id: id(2), action: "deferred"},
				{kind: rk, key: "rk-1", contrib: "m8", id: id(4), action: "inserted"},
			}},
			{via: viaGo, acked: true, items: []sqlItem{{kind: rk, key: "rk-0", contrib: "g5", id: id(3), action: "inserted"}}},
			{via: viaSQL, acked: true, items: []sqlItem{{kind: rk, key: "rk-0", contrib: "s6", id: id(3), action: "replaced"}}},
			{via: viaMany, err: "read: connection reset by peer", transient: true, items: []sqlItem{{kind: rk, key: "rk-0", contrib: "m7"}}},
		}
		jobs := []sqlJob{
			{id: id(1), kind: mk, key: "mk-0", state: "completed", contribs: []string{"s1", "g2"}, merges: []string{note(1)}},
			{id: id(2), kind: mk, key: "mk-0", state: "completed", contribs: []string{"s3", "m4"}, merges: []string{note(2)}},
			{id: id(3), kind: rk, key: "rk-0", state: "completed", contribs: []string{"m7"}, merges: []string{note(3), note(4)}},
			{id: id(4), kind: rk, key: "rk-1", state: "completed", contribs: []string{"m8"}},
		}
		return calls, jobs
	}
	calls, jobs := clean()
	st, v := checkSQLProduced(calls, jobs, 0, []besideRow{{job: id(2), other: id(9), kind: mk, key: "mk-0", otherClaimed: true}})
	if len(v) != 0 {
		t.Fatalf("a clean history reports violations: %q", v)
	}
	if st.itemsAcked != 7 || st.committed != 1 || st.merges != 4 || st.maxContribs != 2 || st.beside != 1 || st.besideUnclaimed != 0 {
		t.Fatalf("counts of a clean history: %+v", st)
	}
	if s := st.String(); !strings.Contains(s, "venturi_enqueue 3 (failed 0)") || !strings.Contains(s, "deferred merges left 0") {
		t.Fatalf("summary: %s", s)
	}

	cases := []struct {
		name   string
		change func(calls []sqlCall, jobs []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow)
		inv    string
		want   string
	}{
		{"an acknowledged deferred contribution lost", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[1].contribs, j[1].merges = []string{"m4"}, nil
			return c, j, 0, nil
		}, invSQLAccounted, `"s3"), answered deferred`},
		{"an inserted contribution in another job than its answer", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[0].contribs, j[1].contribs = []string{"g2", "s3"}, []string{"s1", "m4"}
			return c, j, 0, nil
		}, invSQLAccounted, `answered inserted`},
		{"an answer naming no job", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			c[5].items[0].id = id(77)
			return c, j, 0, nil
		}, invSQLAccounted, "not a job of its kind and key"},
		{"a contribution nobody sent", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[3].contribs = []string{"x99"}
			return c, j, 0, nil
		}, invSQLAccounted, "never sent"},
		{"a replaced key short of its acknowledged enqueues", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[2].merges = nil
			return c, j, 0, nil
		}, invSQLAccounted, "1 jobs and replace entries, 2 acknowledged"},
		{"a deferred merge applied twice (two jobs)", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[0].contribs, j[0].merges = append(j[0].contribs, "s3"), append(j[0].merges, note(9))
			return c, j, 0, nil
		}, invSQLOnce, `contribution "s3" is in 2 places`},
		{"a deferred merge applied twice (one job)", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[1].contribs, j[1].merges = []string{"s3", "m4", "m4"}, []string{note(2), note(2)}
			return c, j, 0, nil
		}, invSQLOnce, "is in the journals of jobs"},
		{"a merge without its contribution", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[0].merges = append(j[0].merges, note(5))
			return c, j, 0, nil
		}, invSQLOnce, "2 contributions, 2 merged entries"},
		{"a merged enqueue that is a job too", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[0].merges = []string{"merged enqueue " + id(2).String()}
			return c, j, 0, nil
		}, invSQLOnce, "is a job of its own too"},
		{"a replaced key with more than was sent", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			j[2].merges = append(j[2].merges, note(6))
			return c, j, 0, nil
		}, invSQLOnce, "4 jobs and replace entries, only 3 enqueues sent"},
		{"a deferred merge left", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			return c, j, 2, nil
		}, invSQLDeferred, "2 enqueues from SQL still wait"},
		{"an insert beside a pending job never claimed", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			return c, j, 0, []besideRow{{job: id(2), other: id(1), kind: mk, key: "mk-0"}}
		}, invSQLDedup, "had never been claimed"},
		{"a failed call that is not transient", func(c []sqlCall, j []sqlJob) ([]sqlCall, []sqlJob, int, []besideRow) {
			c[6].transient, c[6].err = false, "ERROR: venturi_enqueue_many: jobs[0].kind must not be empty (SQLSTATE 22023)"
			return c, j, 0, nil
		}, invSQLErrors, "SQLSTATE 22023"},
	}
	for _, tc := range cases {
		calls, jobs := clean()
		c, j, left, beside := tc.change(calls, jobs)
		_, v := checkSQLProduced(c, j, left, beside)
		if !slices.ContainsFunc(v, func(s string) bool { return strings.HasPrefix(s, tc.inv+": ") && strings.Contains(s, tc.want) }) {
			t.Errorf("%s: want a violation of %q containing %q, got %q", tc.name, tc.inv, tc.want, v)
		}
	}
}
