package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/venturi-dev/venturi"
)

// ---- queues ------------------------------------------------------------------------------

func queuesList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	type list struct {
		Queues []venturi.QueueState
	}
	return readCommand(a, connFlags(fs, true), noArgs, func(ctx context.Context, q *venturi.Queue, _ []string) (list, error) {
		qs, err := q.Queues(ctx)
		return list{orEmpty(qs)}, err
	}, func(w io.Writer, l list) error {
		t := newTable(w, "QUEUE", "STATE", "CONCURRENCY", "AVAILABLE", "RUNNING", "SCHEDULED")
		for _, s := range l.Queues {
			t.row(s.Name, pausedText(s.Paused), limitText(s.Concurrency), fmt.Sprint(s.Available), fmt.Sprint(s.Running), fmt.Sprint(s.Scheduled))
		}
		return t.flush()
	})
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

// actionCommand returns a command that checks its arguments (before it connects) and
// changes something with them, as --actor: do acts and returns what to print.
func actionCommand(a *app, fs *flag.FlagSet, check func(args []string) error, do func(ctx context.Context, q *venturi.Queue, args []string) (string, error)) func(context.Context, []string) error {
	actor := actorFlag(a, fs)
	return readCommand(a, connFlags(fs, false), check, func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		return do(venturi.WithActor(ctx, *actor), q, args)
	}, func(w io.Writer, msg string) error {
		_, err := fmt.Fprintln(w, msg)
		return err
	})
}

func queueName(args []string) error { return nArgs(args, 1, 1, "the queue's name") }

func queuePause(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return actionCommand(a, fs, queueName, func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		name := args[0]
		return fmt.Sprintf("queue %s paused: no job of it starts until venturi queues resume %s", name, name), q.PauseQueue(ctx, name)
	})
}

func queueResume(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return actionCommand(a, fs, queueName, func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		return fmt.Sprintf("queue %s resumed", args[0]), q.ResumeQueue(ctx, args[0])
	})
}

func queueLimit(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	check := func(args []string) error {
		if err := nArgs(args, 2, 2, "the queue's name and its limit"); err != nil {
			return err
		}
		if n, err := strconv.Atoi(args[1]); err != nil || n < 0 {
			return usagef("limit %q: want a number, 0 for no limit", args[1])
		}
		return nil
	}
	return actionCommand(a, fs, check, func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		n, _ := strconv.Atoi(args[1])
		return fmt.Sprintf("queue %s: concurrency %s", args[0], limitText(n)), q.SetQueueConcurrency(ctx, args[0], n)
	})
}

// ---- cron --------------------------------------------------------------------------------

func cronList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	type list struct {
		Schedules []venturi.ScheduleInfo
	}
	return readCommand(a, connFlags(fs, true), noArgs, func(ctx context.Context, q *venturi.Queue, _ []string) (list, error) {
		ss, err := q.Schedules(ctx)
		return list{orEmpty(ss)}, err
	}, func(w io.Writer, l list) error {
		t := newTable(w, "NAME", "CRON", "ZONE", "KIND", "QUEUE", "STATE", "NEXT FIRE", "LAST FIRE", "FIRES", "SKIPPED", "MISSED")
		for _, s := range l.Schedules {
			zone := s.TimeZone
			if zone == "" {
				zone = "UTC"
			}
			t.row(s.Name, s.Cron, zone, s.Kind, s.Queue, pausedText(s.Paused), timeText(s.NextFire), timeText(s.LastFire),
				fmt.Sprint(s.Fires), fmt.Sprint(s.Skipped), s.Missed.String())
		}
		return t.flush()
	})
}

// scheduleAction is a command that pauses or resumes the named schedule.
func scheduleAction(a *app, fs *flag.FlagSet, done string, do func(q *venturi.Queue, ctx context.Context, name string) error) func(context.Context, []string) error {
	check := func(args []string) error { return nArgs(args, 1, 1, "the schedule's name") }
	return actionCommand(a, fs, check, func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		err := do(q, ctx, args[0])
		if errors.Is(err, venturi.ErrNoSchedule) {
			return "", fmt.Errorf("no schedule named %q (venturi cron list shows them)", args[0])
		}
		return fmt.Sprintf("schedule %s %s", args[0], done), err
	})
}

func cronPause(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return scheduleAction(a, fs, "paused", (*venturi.Queue).PauseSchedule)
}

func cronResume(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return scheduleAction(a, fs, "resumed", (*venturi.Queue).ResumeSchedule)
}

// ---- circuits ------------------------------------------------------------------------------

func circuitsList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	type list struct {
		Circuits []venturi.Circuit
	}
	return readCommand(a, connFlags(fs, true), noArgs, func(ctx context.Context, q *venturi.Queue, _ []string) (list, error) {
		cs, err := q.Circuits(ctx)
		return list{orEmpty(cs)}, err
	}, func(w io.Writer, l list) error {
		t := newTable(w, "KIND", "PARTITION", "STATE", "FAILURES", "OPEN UNTIL", "UPDATED")
		for _, cb := range l.Circuits {
			t.row(cb.Kind, cb.Partition, string(cb.State), fmt.Sprintf("%d/%d", cb.Failures, cb.Threshold), timePtrText(cb.OpenUntil), timeText(cb.UpdatedAt))
		}
		return t.flush()
	})
}

func circuitReset(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	check := func(args []string) error { return nArgs(args, 1, 2, "the circuit's kind") }
	return actionCommand(a, fs, check, func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		kind, part, name := args[0], "", args[0]
		if len(args) == 2 {
			part = args[1]
			name += "/" + part
		}
		return fmt.Sprintf("circuit %s closed", name), q.ResetCircuit(ctx, kind, part)
	})
}

// ---- audit -----------------------------------------------------------------------------------

func auditList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	type list struct {
		Entries []venturi.AuditEntry
	}
	c := connFlags(fs, true)
	limit := fs.Int("limit", 50, fmt.Sprintf("the most entries to list (at most %d)", venturi.MaxListPage))
	before := fs.Int64("before", 0, "list the entries with IDs below this one (default: from the newest)")
	check := func(args []string) error {
		if *limit < 1 || *limit > venturi.MaxListPage {
			return usagef("--limit %d: want 1 to %d", *limit, venturi.MaxListPage)
		}
		if *before < 0 {
			return usagef("--before %d: want an audit entry's ID", *before)
		}
		return noArgs(args)
	}
	return readCommand(a, c, check, func(ctx context.Context, q *venturi.Queue, _ []string) (list, error) {
		es, err := q.AuditLog(ctx, *before, *limit)
		return list{orEmpty(es)}, err
	}, func(w io.Writer, l list) error {
		t := newTable(w, "ID", "AT", "ACTOR", "ACTION", "TARGET", "COUNT", "REASON")
		for _, e := range l.Entries {
			t.row(fmt.Sprint(e.ID), timeText(e.At), e.Actor, e.Action, clip(e.Target, 60), fmt.Sprint(e.Count), clip(e.Reason, 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if len(l.Entries) == *limit {
			fmt.Fprintf(a.stderr, "more: venturi audit --before %d\n", l.Entries[len(l.Entries)-1].ID)
		}
		return nil
	})
}
