package main

import (
	"strings"
	"testing"
	"time"
)

// TestCronViolations feeds the cron checker histories: a contiguous ledger whose jobs are
// exactly its fires passes; a fire enqueued twice (a second job for a fire time, a ledger
// row sharing a job), a gap, a late first fire, a coalesced fire, a missing job and a
// schedule whose state disagrees with its ledger fail.
func TestCronViolations(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 400_000_000, time.UTC)
	sec := func(n int) time.Time { return created.Truncate(time.Second).Add(time.Duration(n) * time.Second) }
	id := func(n int) [16]byte { return [16]byte{byte(n)} }
	history := func(n int) (cronState, []cronFireRow, map[[16]byte]int) {
		var fs []cronFireRow
		jobs := map[[16]byte]int{}
		for i := 1; i <= n; i++ {
			fs = append(fs, cronFireRow{at: sec(i), job: id(i), action: "inserted", covers: 1})
			jobs[id(i)] = 1
		}
		return cronState{created: created, lastFire: sec(n), nextFire: sec(n + 1), fires: int64(n)}, fs, jobs
	}
	s, fs, jobs := history(5)
	if v := cronViolations(s, fs, jobs); len(v) != 0 {
		t.Fatalf("a valid history: %v", v)
	}
	cases := []struct {
		name   string
		change func(s *cronState, fs *[]cronFireRow, jobs map[[16]byte]int)
		want   string
	}{
		{"a second job for a fire", func(_ *cronState, _ *[]cronFireRow, jobs map[[16]byte]int) { jobs[id(99)] = 1 },
			"belongs to no fire"},
		{"two fires share a job", func(_ *cronState, fs *[]cronFireRow, _ map[[16]byte]int) { (*fs)[2].job = id(2) },
			"share job"},
		{"a fire time missing", func(s *cronState, fs *[]cronFireRow, _ map[[16]byte]int) {
			*fs = append((*fs)[:2], (*fs)[3:]...)
			s.fires--
		}, "1 fire times between"},
		{"a fire time twice", func(s *cronState, fs *[]cronFireRow, jobs map[[16]byte]int) {
			*fs = append(*fs, cronFireRow{at: sec(5), job: id(6), action: "inserted", covers: 1})
			jobs[id(6)] = 1
			s.fires++
		}, "recorded twice"},
		{"the first fire late", func(_ *cronState, fs *[]cronFireRow, _ map[[16]byte]int) { *fs = (*fs)[1:] },
			"first fire at"},
		{"a coalesced fire", func(_ *cronState, fs *[]cronFireRow, _ map[[16]byte]int) { (*fs)[1].covers = 3 },
			"covers 3"},
		{"a job gone", func(_ *cronState, _ *[]cronFireRow, jobs map[[16]byte]int) { delete(jobs, id(4)) },
			"does not exist"},
		{"the state behind the ledger", func(s *cronState, _ *[]cronFireRow, _ map[[16]byte]int) { s.nextFire = sec(3) },
			"schedule state"},
		{"nothing fired", func(_ *cronState, fs *[]cronFireRow, _ map[[16]byte]int) { *fs = nil }, "no fire"},
	}
	for _, c := range cases {
		s, fs, jobs := history(5)
		c.change(&s, &fs, jobs)
		v := cronViolations(s, fs, jobs)
		if len(v) == 0 || !strings.Contains(strings.Join(v, "\n"), c.want) {
			t.Errorf("%s: violations %q, want one containing %q", c.name, v, c.want)
		}
	}
}
