package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/venturi-dev/venturi"
)

// ---- queues ------------------------------------------------------------------------------

func queuesList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, true)
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		qs, err := q.Queues(ctx)
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(a.stdout, struct {
				Queues []venturi.QueueState `json:"queues"`
			}{append([]venturi.QueueState{}, qs...)})
		}
		t := newTable(a.stdout, "QUEUE", "STATE", "CONCURRENCY", "AVAILABLE", "RUNNING", "SCHEDULED")
		for _, s := range qs {
			t.row(s.Name, pausedText(s.Paused), limitText(s.Concurrency), fmt.Sprint(s.Available), fmt.Sprint(s.Running), fmt.Sprint(s.Scheduled))
		}
		return t.flush()
	}
}

func pausedText(paused bool) string {
	if paused {
		return "paused"
	}
	return "active"
}

func limitText(n int) string {
	if n == 0 {
		return "no limit"
	}
	return strconv.Itoa(n)
}

// queueAction is a command that changes one named queue: do gets the arguments (the
// queue's name first) and returns what to print.
func queueAction(a *app, fs *flag.FlagSet, nargs int, what string, do func(ctx context.Context, q *venturi.Queue, args []string) (string, error)) func(context.Context, []string) error {
	c := connFlags(fs, false)
	actor := actorFlag(a, fs)
	return func(ctx context.Context, args []string) error {
		if err := nArgs(args, nargs, nargs, what); err != nil {
			return err
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		msg, err := do(venturi.WithActor(ctx, *actor), q, args)
		if err != nil {
			return err
		}
		fmt.Fprintln(a.stdout, msg)
		return nil
	}
}

func queuePause(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return queueAction(a, fs, 1, "the queue's name", func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		name := args[0]
		return fmt.Sprintf("queue %s paused: no job of it starts until venturi queues resume %s", name, name), q.PauseQueue(ctx, name)
	})
}

func queueResume(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return queueAction(a, fs, 1, "the queue's name", func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		return fmt.Sprintf("queue %s resumed", args[0]), q.ResumeQueue(ctx, args[0])
	})
}

func queueLimit(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return queueAction(a, fs, 2, "the queue's name and its limit", func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 0 {
			return "", usagef("limit %q: want a number, 0 for no limit", args[1])
		}
		return fmt.Sprintf("queue %s: concurrency %s", args[0], limitText(n)), q.SetQueueConcurrency(ctx, args[0], n)
	})
}

// ---- cron --------------------------------------------------------------------------------

func cronList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, true)
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		ss, err := q.Schedules(ctx)
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(a.stdout, struct {
				Schedules []venturi.ScheduleInfo `json:"schedules"`
			}{append([]venturi.ScheduleInfo{}, ss...)})
		}
		t := newTable(a.stdout, "NAME", "CRON", "ZONE", "KIND", "QUEUE", "STATE", "NEXT FIRE", "LAST FIRE", "FIRES", "SKIPPED", "MISSED")
		for _, s := range ss {
			zone := s.TimeZone
			if zone == "" {
				zone = "UTC"
			}
			t.row(s.Name, s.Cron, zone, s.Kind, s.Queue, pausedText(s.Paused), timeText(s.NextFire), timeText(s.LastFire),
				fmt.Sprint(s.Fires), fmt.Sprint(s.Skipped), s.Missed.String())
		}
		return t.flush()
	}
}

// scheduleAction is a command that changes one named schedule.
func scheduleAction(a *app, fs *flag.FlagSet, done string, do func(q *venturi.Queue, ctx context.Context, name string) error) func(context.Context, []string) error {
	c := connFlags(fs, false)
	actor := actorFlag(a, fs)
	return func(ctx context.Context, args []string) error {
		if err := nArgs(args, 1, 1, "the schedule's name"); err != nil {
			return err
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		err = do(q, venturi.WithActor(ctx, *actor), args[0])
		if errors.Is(err, venturi.ErrNoSchedule) {
			return fmt.Errorf("no schedule named %q (venturi cron list shows them)", args[0])
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "schedule %s %s\n", args[0], done)
		return nil
	}
}

func cronPause(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return scheduleAction(a, fs, "paused", (*venturi.Queue).PauseSchedule)
}

func cronResume(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return scheduleAction(a, fs, "resumed", (*venturi.Queue).ResumeSchedule)
}

// ---- circuits ------------------------------------------------------------------------------

func circuitsList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, true)
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		cs, err := q.Circuits(ctx)
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(a.stdout, struct {
				Circuits []venturi.Circuit `json:"circuits"`
			}{append([]venturi.Circuit{}, cs...)})
		}
		t := newTable(a.stdout, "KIND", "PARTITION", "STATE", "FAILURES", "OPEN UNTIL", "UPDATED")
		for _, cb := range cs {
			t.row(cb.Kind, cb.Partition, string(cb.State), fmt.Sprintf("%d/%d", cb.Failures, cb.Threshold), timePtrText(cb.OpenUntil), timeText(cb.UpdatedAt))
		}
		return t.flush()
	}
}

func circuitReset(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, false)
	actor := actorFlag(a, fs)
	return func(ctx context.Context, args []string) error {
		if err := nArgs(args, 1, 2, "the circuit's kind"); err != nil {
			return err
		}
		kind, part := args[0], ""
		if len(args) == 2 {
			part = args[1]
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		if err := q.ResetCircuit(venturi.WithActor(ctx, *actor), kind, part); err != nil {
			return err
		}
		name := kind
		if part != "" {
			name += "/" + part
		}
		fmt.Fprintf(a.stdout, "circuit %s closed\n", name)
		return nil
	}
}

// ---- audit -----------------------------------------------------------------------------------

func auditList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, true)
	limit := fs.Int("limit", 50, fmt.Sprintf("the most entries to list (at most %d)", venturi.MaxListPage))
	before := fs.Int64("before", 0, "list the entries with IDs below this one (default: from the newest)")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if *limit < 1 || *limit > venturi.MaxListPage {
			return usagef("--limit %d: want 1 to %d", *limit, venturi.MaxListPage)
		}
		if *before < 0 {
			return usagef("--before %d: want an audit entry's ID", *before)
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		es, err := q.AuditLog(ctx, *before, *limit)
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(a.stdout, struct {
				Entries []venturi.AuditEntry `json:"entries"`
			}{append([]venturi.AuditEntry{}, es...)})
		}
		t := newTable(a.stdout, "ID", "AT", "ACTOR", "ACTION", "TARGET", "COUNT", "REASON")
		for _, e := range es {
			t.row(fmt.Sprint(e.ID), timeText(e.At), e.Actor, e.Action, clip(e.Target, 60), fmt.Sprint(e.Count), clip(e.Reason, 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if len(es) == *limit {
			fmt.Fprintf(a.stderr, "more: venturi audit --before %d\n", es[len(es)-1].ID)
		}
		return nil
	}
}
