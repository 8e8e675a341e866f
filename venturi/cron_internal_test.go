package venturi

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi/internal/cronexpr"
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

func TestCronPlanFires(t *testing.T) {
	c, _ := cronexpr.Parse("0 * * * *")
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
	sec, _ := cronexpr.Parse("* * * * * *")
	p = planFires(sec, time.UTC, h(5).Add(-24*time.Hour), now, MissedBackfill, 3, time.Second, cronBatch)
	if len(p.fires) != 3+2 || p.skipped != cronCountLimit-3 {
		t.Errorf("per-second backfill: %d fires, skipped %d", len(p.fires), p.skipped)
	}
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
			c, _ := cronexpr.Parse(expr)
			if _, err := pool.Exec(ctx, `UPDATE venturi_cron SET next_fire = $2 WHERE name = $1`, name, c.Next(tc.from, ny)); err != nil {
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
