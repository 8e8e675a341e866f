package venturi_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/venturi-dev/venturi"
)

// NightlyReport is what the nightly schedule enqueues.
type NightlyReport struct {
	Team string `json:"team"`
}

// Kind names the task.
func (NightlyReport) Kind() string { return "nightly_report" }

// A schedule's fire times, computed without a database: 02:30 every day in Berlin, across
// the spring-forward night (29 March 2026, 02:00 -> 03:00) whose 02:30 does not exist and
// fires at 03:30, the wall time it would have been.
func ExampleSchedule_NextFires() {
	s := venturi.Schedule{Name: "nightly", Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}
	from := time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC)
	fires, err := s.NextFires(from, 4)
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fires {
		fmt.Println(f.Format("Mon 2006-01-02 15:04 MST"))
	}
	_, err = venturi.Schedule{Cron: "0 0 30 2 *"}.NextFires(from, 1)
	fmt.Println(err)
	// Output:
	// Sat 2026-03-28 02:30 CET
	// Sun 2026-03-29 03:30 CEST
	// Mon 2026-03-30 02:30 CEST
	// Tue 2026-03-31 02:30 CEST
	// venturi: invalid cron expression: "0 0 30 2 *" never matches a date
}

// Registering a durable schedule: every service may register it at every start (an
// unchanged definition changes nothing), any worker fires it, and its state is in the
// database. A second registration with another time moves the next fire.
func ExampleQueue_Schedule() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	def := venturi.Schedule{Name: "nightly-report", Cron: "0 2 * * *", TimeZone: "America/New_York",
		Task: NightlyReport{Team: "infra"}, Missed: venturi.MissedOnce}
	for range 2 {
		res, err := q.Schedule(ctx, def)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("created %v, changed %v, next fire at %s local\n", res.Created, res.Changed,
			res.NextFire.In(mustLoadLocation("America/New_York")).Format("15:04"))
	}
	def.Cron = "30 4 * * *"
	res, err := q.Schedule(ctx, def)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("created %v, changed %v, next fire at %s local\n", res.Created, res.Changed,
		res.NextFire.In(mustLoadLocation("America/New_York")).Format("15:04"))

	if err := q.PauseSchedule(ctx, "nightly-report"); err != nil {
		log.Fatal(err)
	}
	si, err := q.ScheduleByName(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(si.Kind, si.Cron, si.TimeZone, si.Missed, "paused:", si.Paused, "fires:", si.Fires)
	removed, err := q.RemoveSchedule(ctx, "nightly-report")
	fmt.Println("removed:", removed, err)
	// Output:
	// created true, changed false, next fire at 02:00 local
	// created false, changed false, next fire at 02:00 local
	// created false, changed true, next fire at 04:30 local
	// nightly_report 30 4 * * * America/New_York once paused: true fires: 0
	// removed: true <nil>
}

func mustLoadLocation(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		log.Fatal(err)
	}
	return loc
}
