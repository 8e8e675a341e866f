package venturi

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/testdb"
)

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// fireTimes returns the n fires of expr after from, formatted in loc.
func fireTimes(t *testing.T, expr string, loc *time.Location, from time.Time, n int) []string {
	t.Helper()
	c, err := parseCron(expr)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	var out []string
	f := from
	for range n {
		f = c.next(f, loc)
		out = append(out, f.In(loc).Format("01-02 15:04:05 MST"))
	}
	return out
}

func TestCronParseAndNext(t *testing.T) {
	utc := time.UTC
	from := time.Date(2026, 1, 30, 23, 59, 30, 0, utc) // a Friday
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"* * * * *", []string{"01-31 00:00:00 UTC", "01-31 00:01:00 UTC"}},
		{"*/15 * * * * *", []string{"01-30 23:59:45 UTC", "01-31 00:00:00 UTC", "01-31 00:00:15 UTC"}},
		{"0 9 * * mon-fri", []string{"02-02 09:00:00 UTC", "02-03 09:00:00 UTC"}},
		{"0 0 1 JAN,jul *", []string{"07-01 00:00:00 UTC", "01-01 00:00:00 UTC"}},
		{"30 4 1,15 * 5", []string{"01-30 04:30:00 UTC"}[:0]}, // filled below: dom OR dow
		{"@hourly", []string{"01-31 00:00:00 UTC", "01-31 01:00:00 UTC"}},
		{"@daily", []string{"01-31 00:00:00 UTC", "02-01 00:00:00 UTC"}},
		{"@weekly", []string{"02-01 00:00:00 UTC", "02-08 00:00:00 UTC"}},
		{"@monthly", []string{"02-01 00:00:00 UTC", "03-01 00:00:00 UTC"}},
		{"0 0 29 2 *", []string{"02-29 00:00:00 UTC"}}, // 2028
		{"0 12 * * 7", []string{"02-01 12:00:00 UTC"}}, // 7 is Sunday
		{"5/20 10-12/2 * * *", []string{"01-31 10:05:00 UTC", "01-31 10:25:00 UTC", "01-31 10:45:00 UTC", "01-31 12:05:00 UTC"}},
	} {
		if len(tc.want) == 0 {
			continue
		}
		got := fireTimes(t, tc.expr, utc, from, len(tc.want))
		if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
			t.Errorf("%q: got %v, want %v", tc.expr, got, tc.want)
		}
	}
	// Both day fields restricted: the 1st or 15th, or any Friday.
	got := fireTimes(t, "30 4 1,15 * fri", utc, time.Date(2026, 1, 31, 0, 0, 0, 0, utc), 4)
	want := []string{"02-01 04:30:00 UTC", "02-06 04:30:00 UTC", "02-13 04:30:00 UTC", "02-15 04:30:00 UTC"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("dom|dow: got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
		"* * * 13 *", "* * * * 8", "*/0 * * * *", "5-1 * * * *", "a * * * *", "@often", "0 0 30 2 *", "0 0 31 4 *",
		"1,,2 * * * *", "-1 * * * *", "+1 * * * *", "1-2-3 * * * *", strings.Repeat("1,", 200) + "1 * * * *"} {
		if _, err := parseCron(bad); !errors.Is(err, ErrInvalidCron) {
			t.Errorf("%q: err %v, want ErrInvalidCron", bad, err)
		}
	}
}

// TestCronDST: the two DST rules, in New York (2026: clocks jump 02:00 -> 03:00 EST->EDT
// on 8 March and fall back 02:00 -> 01:00 on 1 November) and Berlin (29 March: 02:00 ->
// 03:00; 25 October: 03:00 -> 02:00), for a daily schedule inside the skipped or
// repeated hour and an hourly one.
func TestCronDST(t *testing.T) {
	ny, berlin := mustLoc(t, "America/New_York"), mustLoc(t, "Europe/Berlin")
	for _, tc := range []struct {
		name, expr string
		loc        *time.Location
		from       time.Time
		want       []string
	}{
		{"NY skipped hour, daily in the gap: fires at 03:30 EDT that day", "30 2 * * *", ny,
			time.Date(2026, 3, 7, 12, 0, 0, 0, ny), []string{"03-08 03:30:00 EDT", "03-09 02:30:00 EDT"}},
		{"NY skipped hour, hourly: no 02:00, nothing twice", "0 * * * *", ny,
			time.Date(2026, 3, 8, 0, 30, 0, 0, ny), []string{"03-08 01:00:00 EST", "03-08 03:00:00 EDT", "03-08 04:00:00 EDT"}},
		{"NY skipped hour, at :30 hourly", "30 * * * *", ny,
			time.Date(2026, 3, 8, 0, 45, 0, 0, ny), []string{"03-08 01:30:00 EST", "03-08 03:30:00 EDT", "03-08 04:30:00 EDT"}},
		{"NY repeated hour, daily in the overlap: once, at the first 01:30", "30 1 * * *", ny,
			time.Date(2026, 10, 31, 12, 0, 0, 0, ny), []string{"11-01 01:30:00 EDT", "11-02 01:30:00 EST"}},
		{"NY repeated hour, hourly: both 01:00s, real time", "0 * * * *", ny,
			time.Date(2026, 11, 1, 0, 30, 0, 0, ny), []string{"11-01 01:00:00 EDT", "11-01 01:00:00 EST", "11-01 02:00:00 EST"}},
		{"NY repeated hour, every 20 minutes follows real time", "*/20 * * * *", ny,
			time.Date(2026, 11, 1, 1, 30, 0, 0, ny),
			[]string{"11-01 01:40:00 EDT", "11-01 01:00:00 EST", "11-01 01:20:00 EST", "11-01 01:40:00 EST", "11-01 02:00:00 EST"}},
		{"Berlin skipped hour, daily 02:15", "15 2 * * *", berlin,
			time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), []string{"03-29 03:15:00 CEST", "03-30 02:15:00 CEST"}},
		{"Berlin repeated hour, daily 02:15", "15 2 * * *", berlin,
			time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), []string{"10-25 02:15:00 CEST", "10-26 02:15:00 CET"}},
		{"Berlin repeated hour, hourly", "0 * * * *", berlin,
			time.Date(2026, 10, 25, 1, 30, 0, 0, berlin), []string{"10-25 02:00:00 CEST", "10-25 02:00:00 CET", "10-25 03:00:00 CET"}},
		{"Berlin skipped hour, hourly", "0 * * * *", berlin,
			time.Date(2026, 3, 29, 1, 30, 0, 0, berlin), []string{"03-29 03:00:00 CEST", "03-29 04:00:00 CEST"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fireTimes(t, tc.expr, tc.loc, tc.from, len(tc.want))
			if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestCronPlanFires(t *testing.T) {
	c, _ := parseCron("0 * * * *")
	h := func(n int) time.Time { return time.Date(2026, 5, 1, n, 0, 0, 0, time.UTC) }
	now := h(10).Add(30 * time.Second)
	// next = 05:00: 05..09 missed, 10:00 on time (grace 1 min).
	p := planFires(c, time.UTC, h(5), now, MissedOnce, 0, time.Minute, cronBatch)
	if len(p.fires) != 2 || !p.fires[0].at.Equal(h(9)) || p.fires[0].covers != 5 || !p.fires[1].at.Equal(h(10)) ||
		p.coalesced != 4 || !p.next.Equal(h(11)) {
		t.Errorf("once: %+v", p)
	}
	p = planFires(c, time.UTC, h(5), now, MissedSkip, 0, time.Minute, cronBatch)
	if len(p.fires) != 1 || !p.fires[0].at.Equal(h(10)) || p.skipped != 5 {
		t.Errorf("skip: %+v", p)
	}
	p = planFires(c, time.UTC, h(5), now, MissedBackfill, 3, time.Minute, cronBatch)
	if len(p.fires) != 4 || !p.fires[0].at.Equal(h(7)) || p.skipped != 2 {
		t.Errorf("backfill: %+v", p)
	}
	p = planFires(c, time.UTC, h(5), now, MissedBackfill, 10, time.Minute, 2)
	if len(p.fires) != 2 || !p.next.Equal(h(7)) {
		t.Errorf("batch: %+v", p)
	}
	// A per-second schedule after a day's outage: the window search stays cheap.
	sec, _ := parseCron("* * * * * *")
	p = planFires(sec, time.UTC, h(5).Add(-24*time.Hour), now, MissedBackfill, 3, time.Second, cronBatch)
	if len(p.fires) != 3+2 || p.skipped != cronCountLimit-3 {
		t.Errorf("per-second backfill: %d fires, skipped %d", len(p.fires), p.skipped)
	}
}

// FuzzCronParse: whatever parses yields strictly increasing fire times whose wall times
// match the expression, in UTC and across New York's DST changes; nothing panics.
func FuzzCronParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/7 1-5 * * mon", "0 0 29 2 *", "@hourly", "5/20 10-12/2 1,15 * fri",
		"0 30 2 * * *", "59 59 23 31 12 *", "? ? ? ? ?"} {
		f.Add(s, int64(1772900000))
	}
	ny := mustLoc(f, "America/New_York")
	f.Fuzz(func(t *testing.T, expr string, start int64) {
		c, err := parseCron(expr)
		if err != nil {
			return
		}
		from := time.Unix(start%(4e9), 0)
		for _, loc := range []*time.Location{time.UTC, ny} {
			prev := from
			for range 20 {
				n := c.next(prev, loc)
				if n.IsZero() {
					break
				}
				if !n.After(prev) {
					t.Fatalf("%q in %v: next(%v) = %v, not after", expr, loc, prev, n)
				}
				if loc == time.UTC {
					w := n.UTC()
					if c.sec&(1<<w.Second()) == 0 || c.min&(1<<w.Minute()) == 0 || c.hour&(1<<w.Hour()) == 0 ||
						c.month&(1<<int(w.Month())) == 0 || !c.dayMatches(w) {
						t.Fatalf("%q: %v does not match", expr, w)
					}
				}
				prev = n
			}
		}
	})
}

// TestCronFireDueWithDatabaseTime drives the firing transaction through New York's
// spring-forward and fall-back days with the database time injected, in 10-minute steps,
// and reads the ledger: the daily schedules in the gap and in the overlap fire once a
// day, the hourly one once per real hour, each fire once.
func TestCronFireDueWithDatabaseTime(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.Schema(t), 4)
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	q := NewQueue(pool, QueueConfig{NoNotify: true})
	s := newCronService(Config{MaintenanceInterval: time.Second, PollOnly: true}, slog.New(slog.DiscardHandler), pool, dbsqlc.New())
	ny := mustLoc(t, "America/New_York")
	for _, tc := range []struct {
		from, to time.Time
		want     map[string][]string
	}{
		{time.Date(2026, 3, 7, 20, 0, 0, 0, ny), time.Date(2026, 3, 9, 4, 0, 0, 0, ny), map[string][]string{
			"daily-0230": {"03-08 03:30 EDT", "03-09 02:30 EDT"},
			"daily-0130": {"03-08 01:30 EST", "03-09 01:30 EDT"},
			"hourly":     nil, // checked by count below
		}},
		{time.Date(2026, 10, 31, 20, 0, 0, 0, ny), time.Date(2026, 11, 2, 4, 0, 0, 0, ny), map[string][]string{
			"daily-0230": {"11-01 02:30 EST", "11-02 02:30 EST"},
			"daily-0130": {"11-01 01:30 EDT", "11-02 01:30 EST"},
			"hourly":     nil,
		}},
	} {
		for name, expr := range map[string]string{"daily-0230": "30 2 * * *", "daily-0130": "30 1 * * *", "hourly": "0 * * * *"} {
			if _, err := q.RemoveSchedule(ctx, name); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Schedule(ctx, Schedule{Name: name, Cron: expr, TimeZone: "America/New_York",
				Task: cronProbe{Name: name}, Missed: MissedSkip}); err != nil {
				t.Fatal(err)
			}
			c, _ := parseCron(expr)
			if _, err := pool.Exec(ctx, `UPDATE venturi_cron SET next_fire = $2 WHERE name = $1`, name, c.next(tc.from, ny)); err != nil {
				t.Fatal(err)
			}
		}
		for now := tc.from; !now.After(tc.to); now = now.Add(10 * time.Minute) {
			if _, _, err := s.fireDue(ctx, &now); err != nil {
				t.Fatal(err)
			}
		}
		for name, want := range tc.want {
			fires, err := q.ScheduleFires(ctx, name, time.Time{}, 100)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := len(fires) - 1; i >= 0; i-- {
				got = append(got, fires[i].At.In(ny).Format("01-02 15:04 MST"))
				if fires[i].Covers != 1 || fires[i].Skipped != 0 {
					t.Errorf("%s: fire %v covers %d skipped %d", name, fires[i].At, fires[i].Covers, fires[i].Skipped)
				}
			}
			if name == "hourly" {
				// One fire per real hour between the first fire and the end.
				if hours := int(tc.to.Sub(fires[len(fires)-1].At).Hours()) + 1; len(fires) != hours {
					t.Errorf("hourly: %d fires over %d real hours: %v", len(fires), hours, got)
				}
				continue
			}
			if strings.Join(got, ", ") != strings.Join(want, ", ") {
				t.Errorf("%s: fires %v, want %v", name, got, want)
			}
		}
	}
}

type cronProbe struct {
	Name string `json:"name"`
}

func (cronProbe) Kind() string { return "cron_probe" }

// TestCronUnloadableScheduleIsLeftToOthers: a due schedule whose time zone this worker
// cannot load (a host without that zone) is skipped and logged once; the other due
// schedules fire, and the worker does not spin on it (no due time reported).
func TestCronUnloadableScheduleIsLeftToOthers(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t, testdb.Schema(t), 4)
	if _, err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	q := NewQueue(pool, QueueConfig{NoNotify: true})
	var logs strings.Builder
	s := newCronService(Config{MaintenanceInterval: time.Second, PollOnly: true}, slog.New(slog.NewTextHandler(&logs, nil)), pool, dbsqlc.New())
	for _, name := range []string{"good", "bad"} {
		if _, err := q.Schedule(ctx, Schedule{Name: name, Cron: "0 0 1 1 *", Task: cronProbe{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE venturi_cron SET next_fire = date_trunc('second', now()) - interval '1 second',
		time_zone = CASE name WHEN 'bad' THEN 'Mars/Olympus' ELSE time_zone END`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		more, dueIn, err := s.fireDue(ctx, nil)
		if err != nil || more || dueIn != nil {
			t.Fatalf("fireDue = %v, %v, %v; want no due time while only the unloadable one is due", more, dueIn, err)
		}
	}
	for name, want := range map[string]int{"good": 1, "bad": 0} {
		fs, err := q.ScheduleFires(ctx, name, time.Time{}, 10)
		if err != nil || len(fs) != want {
			t.Errorf("%s: %d fires (%v), want %d", name, len(fs), err, want)
		}
	}
	if n := strings.Count(logs.String(), "cannot fire schedule here"); n != 1 || !strings.Contains(logs.String(), "schedule=bad") {
		t.Errorf("logged %d times:\n%s", n, logs.String())
	}
}
