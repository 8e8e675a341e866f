package maintenance_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/cronexpr"
	"github.com/venturi-dev/venturi/internal/maintenance"
)

// newCronFirer returns a firer on the bundle's schema configured as a polling worker's
// (no NOTIFY) with venturi's limits.
func newCronFirer(b *testBundle, log *slog.Logger) *maintenance.CronFirer {
	return maintenance.NewCronFirer(maintenance.CronFirerConfig{
		Interval: time.Second, Batch: 1000, CountLimit: 100000, LockedRetry: 20 * time.Millisecond,
		PruneBatch: 5000, RetainFires: 24 * time.Hour, InTx: b.txFunc, Logger: log,
	}, b.pool, b.q)
}

// mustLoc loads the time zone name or fails the test.
func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCronFirerFiresAtTheDatabaseTime drives the firing transaction through New York's
// spring-forward and fall-back days with the database time injected, in 10-minute steps,
// and reads the ledger: the daily schedules in the gap and in the overlap fire once a
// day, the hourly one once per real hour, each fire once.
func TestCronFirerFiresAtTheDatabaseTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pool := b.pool
	q := venturi.NewQueue(pool, venturi.QueueConfig{NoNotify: true})
	s := newCronFirer(b, b.log)
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
			if _, err := q.Schedule(ctx, venturi.Schedule{Name: name, Cron: expr, TimeZone: "America/New_York",
				Task: cronProbe{Name: name}, Missed: venturi.MissedSkip}); err != nil {
				t.Fatal(err)
			}
			c, _ := cronexpr.Parse(expr)
			if _, err := pool.Exec(ctx, `UPDATE venturi_cron SET next_fire = $2 WHERE name = $1`, name, c.Next(tc.from, ny)); err != nil {
				t.Fatal(err)
			}
		}
		for now := tc.from; !now.After(tc.to); now = now.Add(10 * time.Minute) {
			if _, _, err := s.FireDueAt(ctx, now); err != nil {
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

// cronProbe is the task the test schedules enqueue.
type cronProbe struct {
	Name string `json:"name"`
}

// Kind names the task.
func (cronProbe) Kind() string { return "cron_probe" }

// TestCronFirerLeavesAnUnloadableScheduleToOthers: a due schedule whose time zone this worker
// cannot load (a host without that zone) is skipped and logged once; the other due
// schedules fire, and the worker does not spin on it (no due time reported).
func TestCronFirerLeavesAnUnloadableScheduleToOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pool := b.pool
	q := venturi.NewQueue(pool, venturi.QueueConfig{NoNotify: true})
	var logs strings.Builder
	s := newCronFirer(b, slog.New(slog.NewTextHandler(&logs, nil)))
	for _, name := range []string{"good", "bad"} {
		if _, err := q.Schedule(ctx, venturi.Schedule{Name: name, Cron: "0 0 1 1 *", Task: cronProbe{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE venturi_cron SET next_fire = date_trunc('second', now()) - interval '1 second',
		time_zone = CASE name WHEN 'bad' THEN 'Mars/Olympus' ELSE time_zone END`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		more, dueIn, err := s.RunOnce(ctx)
		if err != nil || more || dueIn != nil {
			t.Fatalf("RunOnce = %v, %v, %v; want no due time while only the unloadable one is due", more, dueIn, err)
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
