package main

import (
	"context"
	"time"

	"github.com/venturi-dev/venturi"
)

// cronKind is the kind of the jobs the chaos suite's durable cron schedule enqueues, and
// cronSchedule the schedule's name. The driver never enqueues them: every worker
// registers the schedule at start (again after each restart, concurrently with the
// others), and whichever worker is up fires it, once a second.
const (
	cronKind     = "chaos.cron"
	cronSchedule = "chaos-every-second"
)

// CronTick is what each fire of the schedule enqueues; its handler completes at once.
type CronTick struct{}

// Kind implements venturi.Task.
func (CronTick) Kind() string { return cronKind }

// Handle completes the tick.
func (CronTick) Handle(context.Context, *venturi.Run[struct{}], App) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// cronDefinition is the schedule every worker registers: every second, UTC, backfilling
// up to 1,000 missed fires (a fire is missed only when no worker enqueued it within the
// default minute of grace, which the faults here never reach), so that every fire time
// from the schedule's creation on must be in the ledger with its own job.
func cronDefinition() venturi.Schedule {
	return venturi.Schedule{Name: cronSchedule, Cron: "* * * * * *", Task: CronTick{},
		Missed: venturi.MissedBackfill, Backfill: venturi.MaxCronBackfill}
}

// registerCron registers the schedule, retrying while the database restarts.
func registerCron(ctx context.Context, q *venturi.Queue) error {
	for {
		_, err := q.Schedule(ctx, cronDefinition())
		if err == nil || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
