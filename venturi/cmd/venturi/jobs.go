package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// parseFilter parses the filter given as arguments, joined with spaces. An argument that
// does not parse alone because the shell took the quotes off its value (note:"a b"
// arrives as note:a b) is quoted again.
func parseFilter(args []string) (venturi.JobFilter, error) {
	if len(args) == 0 {
		return venturi.JobFilter{}, nil
	}
	terms := make([]string, len(args))
	for i, arg := range args {
		terms[i] = arg
		if parses(arg) {
			continue
		}
		key, value, ok := strings.Cut(arg, ":")
		if !ok || key == "" || strings.HasPrefix(value, `"`) || !oneValue(value) {
			continue
		}
		if quoted := key + ":" + strconv.Quote(value); parses(quoted) {
			terms[i] = quoted
		}
	}
	f, err := venturi.ParseJobFilter(strings.Join(terms, " "))
	if err != nil {
		return f, usagef("%v (venturi help filter describes the grammar)", err)
	}
	return f, nil
}

// oneValue reports whether v looks like one value with spaces, not several terms: no word
// after its first has a colon.
func oneValue(v string) bool {
	words := strings.Fields(v)
	for _, w := range words[min(1, len(words)):] {
		if strings.Contains(w, ":") {
			return false
		}
	}
	return true
}

func parses(filter string) bool {
	_, err := venturi.ParseJobFilter(filter)
	return err == nil
}

func jobsList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, true)
	limit := fs.Int("limit", 50, fmt.Sprintf("the most jobs to list (at most %d)", venturi.MaxListPage))
	cursor := fs.String("cursor", "", "list the page after this cursor (printed after a full page)")
	return func(ctx context.Context, args []string) error {
		if *limit < 1 || *limit > venturi.MaxListPage {
			return usagef("--limit %d: want 1 to %d", *limit, venturi.MaxListPage)
		}
		f, err := parseFilter(args)
		if err != nil {
			return err
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		page, err := q.ListJobs(ctx, f, *cursor, *limit)
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(a.stdout, struct {
				Jobs    []venturi.JobSummary
				Next    string
				Partial bool `json:",omitempty"`
			}{append([]venturi.JobSummary{}, page.Jobs...), page.Next, page.Partial})
		}
		t := newTable(a.stdout, "ID", "KIND", "QUEUE", "STATE", "PRI", "RUNS", "FAILS", "RUN AT", "CREATED", "LAST")
		for _, j := range page.Jobs {
			last := string(j.LastEvent)
			if j.LastNote != "" {
				last += ": " + j.LastNote
			}
			state := string(j.State)
			if j.StopRequested {
				state += " (stopping)"
			}
			t.row(j.ID.String(), j.Kind, j.Queue, state, fmt.Sprint(j.Priority), fmt.Sprint(j.RunCount),
				fmt.Sprint(j.Failures), timeText(j.RunAt), timeText(j.CreatedAt), clip(last, 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if page.Partial {
			fmt.Fprintf(a.stderr, "searched %d more jobs (no index serves a note, payload or attachment match) and stopped there\n", venturi.ListSearchWindow)
		}
		if page.Next != "" {
			fmt.Fprintf(a.stderr, "more: venturi jobs list --cursor %s ...\n", page.Next)
		}
		return nil
	}
}

// jobID parses a job's ID argument.
func jobID(s string) (ulid.ULID, error) {
	id, err := ulid.ParseStrict(s)
	if err != nil {
		return id, usagef("job ID %q: not a ULID", s)
	}
	return id, nil
}

func jobsShow(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return readCommand(a, connFlags(fs, true), oneJobID, func(ctx context.Context, q *venturi.Queue, args []string) (*venturi.JobDetail, error) {
		return readJob(ctx, args[0], q.JobDetail)
	}, printDetail)
}

// oneJobID checks that the arguments are one job ID.
func oneJobID(args []string) error {
	if err := nArgs(args, 1, 1, "the job's ID"); err != nil {
		return err
	}
	_, err := jobID(args[0])
	return err
}

// readJob reads the job named by the argument id with read.
func readJob[T any](ctx context.Context, id string, read func(context.Context, ulid.ULID) (T, error)) (T, error) {
	var zero T
	u, err := jobID(id)
	if err != nil {
		return zero, err
	}
	v, err := read(ctx, u)
	if errors.Is(err, venturi.ErrNotFound) {
		return zero, fmt.Errorf("job %s: not found (unknown, or pruned after it finished)", u)
	}
	return v, err
}

// printDetail prints a job's detail as text.
func printDetail(w io.Writer, d *venturi.JobDetail) error {
	k := newKV(w)
	k.add("id", d.ID.String())
	k.add("kind", d.Kind)
	k.add("queue", d.Queue)
	state := string(d.State)
	if d.Owner != "" {
		state += " on " + d.Owner
	}
	k.add("state", state)
	k.add("priority", fmt.Sprint(d.Priority))
	k.add("dedup key", string(d.DedupKey))
	k.add("partition", d.Partition)
	if d.Slot != nil {
		k.add("slot", fmt.Sprintf("%s (limit %d, policy %d)", d.Slot.Key, d.Slot.Limit, d.Slot.Policy))
	}
	if d.Singleton {
		k.add("singleton", "yes")
	}
	k.add("runs", fmt.Sprintf("%d, failures %d", d.RunCount, d.Failures))
	k.add("run at", timeText(d.RunAt))
	k.add("created", timeText(d.CreatedAt))
	k.add("attempted", timePtrText(d.AttemptedAt))
	k.add("finished", timePtrText(d.FinishedAt))
	if d.StopRequested {
		k.add("stop requested", strings.TrimSuffix(fmt.Sprintf("%s: %s", d.StopEvent, d.StopNote), ": "))
	}
	for _, key := range slices.Sorted(maps.Keys(d.Meta)) {
		k.add("meta "+key, d.Meta[key])
	}
	if cb := d.Circuit; cb != nil {
		k.add("circuit", fmt.Sprintf("%s (%d of %d failures) until %s", cb.State, cb.Failures, cb.Threshold, timePtrText(cb.OpenUntil)))
	}
	k.add("payload", jsonText(d.Payload))
	k.add("carry", jsonText(d.Carry))
	if err := k.flush(); err != nil {
		return err
	}

	if len(d.Runs) > 0 {
		fmt.Fprintln(w, "\nruns:")
		t := newTable(w, "  RUN", "WORKER", "STARTED", "DURATION", "EVENT", "NOTE", "ATTACHMENT")
		for _, r := range d.Runs {
			ev := string(r.Event)
			if r.ResumeIn > 0 {
				ev += " (in " + durText(r.ResumeIn) + ")"
			}
			t.row("  "+fmt.Sprint(r.Run), r.Worker, timeText(r.StartedAt), durText(r.Duration), ev, clip(r.Note, 80), clip(jsonText(r.Attachment), 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if err := printOtherEntries(w, d.Journal); err != nil {
		return err
	}
	if s := d.JournalDropped; s != nil {
		fmt.Fprintf(w, "\n%d older journal entries dropped (%s to %s)\n", s.Entries, timeText(s.FirstAt), timeText(s.LastAt))
	}
	if len(d.Steps) > 0 {
		fmt.Fprintln(w, "\nsteps:")
		t := newTable(w, "  NAME", "RUN", "AT", "RESULT")
		for _, s := range d.Steps {
			t.row("  "+s.Name, fmt.Sprint(s.Run), timeText(s.At), clip(jsonText(s.Result), 80))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(d.Signals) > 0 {
		fmt.Fprintln(w, "\nsignals:")
		t := newTable(w, "  SEQ", "NAME", "SENT", "CONSUMED", "DELIVERY", "PAYLOAD")
		for _, s := range d.Signals {
			consumed := timePtrText(s.ConsumedAt)
			if consumed == "" {
				consumed = "pending"
			}
			t.row("  "+fmt.Sprint(s.Seq), s.Name, timeText(s.SentAt), consumed, s.DeliveryID, clip(jsonText(s.Payload), 60))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(d.Hooks) > 0 {
		fmt.Fprintln(w, "\nhooks:")
		t := newTable(w, "  NAME", "REUSABLE", "CREATED", "EXPIRES", "USED", "DISPOSED")
		for _, h := range d.Hooks {
			t.row("  "+h.Name, fmt.Sprint(h.Reusable), timeText(h.CreatedAt), timeText(h.ExpiresAt), timePtrText(h.UsedAt), timePtrText(h.DisposedAt))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if d.Explain != nil {
		fmt.Fprintln(w)
		printExplanation(w, d.Explain)
	}
	return nil
}

// printOtherEntries prints the entries of a recent journal that are not runs: merges,
// operators' retries and cancels.
func printOtherEntries(w io.Writer, journal []venturi.JournalEntry) error {
	var t *table
	for _, e := range journal {
		if e.Run != 0 {
			continue
		}
		if t == nil {
			fmt.Fprintln(w, "\nother journal entries:")
			t = newTable(w, "  SEQ", "AT", "EVENT", "NOTE")
		}
		note := e.Note
		if e.Event == venturi.EventMerged {
			note = strings.TrimSpace(fmt.Sprintf("%s %s", e.Merge, note))
		}
		t.row("  "+fmt.Sprint(e.Seq), timeText(e.At), string(e.Event), clip(note, 80))
	}
	if t == nil {
		return nil
	}
	return t.flush()
}

// printExplanation prints what holds a job back and its retry schedule.
func printExplanation(w io.Writer, e *venturi.JobExplanation) {
	fmt.Fprintln(w, "explain:")
	for _, r := range e.Reasons {
		fmt.Fprintf(w, "  - %s\n", cleanCell(r))
	}
	if len(e.Reasons) == 0 {
		fmt.Fprintln(w, "  - nothing holds it back")
	}
	if len(e.Retries) > 0 {
		ds := make([]string, len(e.Retries))
		for i, d := range e.Retries {
			ds[i] = spanText(d)
		}
		fmt.Fprintf(w, "  retry delays: %s (%d more retries, then dead)\n", strings.Join(ds, ", "), len(ds))
	}
}

func explainCmd(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	return readCommand(a, connFlags(fs, true), oneJobID, func(ctx context.Context, q *venturi.Queue, args []string) (*venturi.JobExplanation, error) {
		return readJob(ctx, args[0], q.ExplainJob)
	}, func(w io.Writer, e *venturi.JobExplanation) error {
		printExplanation(w, e)
		return nil
	})
}

// ---- bulk actions ----------------------------------------------------------------------

// bulkAction is one of jobs retry, cancel and delete.
type bulkAction struct {
	name, done, summary, eligible string
	do                            func(q *venturi.Queue, ctx context.Context, f venturi.JobFilter, o venturi.BulkOptions) (venturi.BulkResult, error)
}

var (
	retryAction = bulkAction{name: "retry", done: "retried",
		summary:  "make dead, cancelled, completed and scheduled jobs available now",
		eligible: "dead, cancelled, completed and scheduled jobs",
		do:       (*venturi.Queue).RetryJobs}
	cancelAction = bulkAction{name: "cancel", done: "cancelled",
		summary:  "cancel pending jobs, and ask running ones to stop",
		eligible: "jobs that have not finished",
		do:       (*venturi.Queue).CancelJobs}
	deleteAction = bulkAction{name: "delete", done: "deleted",
		summary:  "delete jobs that are not running, with their journals, steps, signals and hooks",
		eligible: "jobs that are not running",
		do:       (*venturi.Queue).DeleteJobs}
)

func bulkCommand(b bulkAction) *command {
	return &command{
		name: b.name, args: "(ID... | --filter FILTER)", summary: b.summary,
		detail: fmt.Sprintf(`It applies to %s. Over a filter it needs --yes, or a
confirmation when stdin is a terminal; --dry-run counts the jobs it would change.
The action and its reason are recorded in the audit log (venturi audit).`, b.eligible),
		setup: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error { return bulkRun(a, fs, b) },
	}
}

func bulkRun(a *app, fs *flag.FlagSet, b bulkAction) func(context.Context, []string) error {
	c := connFlags(fs, true)
	filter := fs.String("filter", "", "act on every job this filter matches (venturi help filter)")
	dryRun := fs.Bool("dry-run", false, "count what would change, change nothing")
	yes := fs.Bool("yes", false, "act on a filter without asking")
	reason := fs.String("reason", "", "why: written in each job's journal and in the audit log")
	limit := fs.Int("limit", 0, fmt.Sprintf("change at most this many jobs (default and at most %d)", venturi.MaxBulkJobs))
	actor := actorFlag(a, fs)
	return func(ctx context.Context, args []string) error {
		f, byFilter, err := bulkTarget(*filter, fs, args)
		if err != nil {
			return err
		}
		if *limit < 0 || *limit > venturi.MaxBulkJobs {
			return usagef("--limit %d: want 0 to %d", *limit, venturi.MaxBulkJobs)
		}
		if byFilter && !*yes && !*dryRun && !a.stdinTTY {
			return usagef("--filter acts on every matching job: pass --yes to go ahead, or --dry-run to count them")
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		ctx = venturi.WithActor(ctx, *actor)
		o := venturi.BulkOptions{Limit: *limit, Reason: *reason}
		if *dryRun || (byFilter && !*yes) {
			o.DryRun = true
			res, err := b.do(q, ctx, f, o)
			if err != nil {
				return err
			}
			if *dryRun {
				return a.bulkReport(c.json, b, res, true, *limit)
			}
			if ok, err := a.confirm(b, *filter, res); !ok || err != nil {
				return err
			}
			o.DryRun = false
		}
		res, err := b.do(q, ctx, f, o)
		if err != nil {
			return err
		}
		if err := a.bulkReport(c.json, b, res, false, *limit); err != nil {
			return err
		}
		if n := len(f.IDs); !byFilter && res.Changed < n {
			a.errorf("venturi jobs %s: %d of the %d jobs given were not %s: not found, or not %s", b.name, n-res.Changed, n, b.done, b.eligible)
			return exitCode(exitError)
		}
		return nil
	}
}

// bulkTarget reads the jobs a bulk action is for: the IDs given, or --filter.
func bulkTarget(filter string, fs *flag.FlagSet, args []string) (f venturi.JobFilter, byFilter bool, err error) {
	filterSet := false
	fs.Visit(func(fl *flag.Flag) { filterSet = filterSet || fl.Name == "filter" })
	switch {
	case filterSet && len(args) > 0:
		return f, false, usagef("give job IDs or --filter, not both")
	case filterSet && strings.TrimSpace(filter) == "":
		return f, false, usagef("--filter is empty, which would match every job: name a state, kind or queue")
	case filterSet:
		f, err = parseFilter([]string{filter})
		return f, true, err
	case len(args) == 0:
		return f, false, usagef("give job IDs or --filter")
	}
	seen := map[ulid.ULID]bool{}
	for _, s := range args {
		id, err := jobID(s)
		if err != nil {
			return f, false, err
		}
		if !seen[id] {
			seen[id] = true
			f.IDs = append(f.IDs, id)
		}
	}
	return f, false, nil
}

// confirm asks on the terminal whether to go ahead with what the dry run res found.
func (a *app) confirm(b bulkAction, filter string, res venturi.BulkResult) (bool, error) {
	if res.Eligible == 0 {
		fmt.Fprintf(a.stdout, "no job to %s: %d match, none of them %s\n", b.name, res.Matched, b.eligible)
		return false, nil
	}
	more := ""
	if res.More {
		more = " (the limit's worth; more remain)"
	}
	fmt.Fprintf(a.stderr, "%s %d job(s)%s matching %s (%d match)? [y/N] ", b.name, res.Eligible, more, filter, res.Matched)
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	if answer := strings.ToLower(strings.TrimSpace(line)); answer == "y" || answer == "yes" {
		return true, nil
	}
	a.errorf("venturi jobs %s: not confirmed; nothing changed", b.name)
	return false, exitCode(exitError)
}

// bulkReport prints what a bulk action did or, on a dry run, would do.
func (a *app) bulkReport(asJSON bool, b bulkAction, res venturi.BulkResult, dry bool, limit int) error {
	if asJSON {
		return writeJSON(a.stdout, struct {
			DryRun bool
			venturi.BulkResult
		}{dry, res})
	}
	if dry {
		would := res.Eligible
		if limit > 0 {
			would = min(would, limit)
		}
		fmt.Fprintf(a.stdout, "dry run: would %s %d job(s) (%d match, %d eligible)\n", b.name, would, res.Matched, res.Eligible)
	} else {
		fmt.Fprintf(a.stdout, "%s %d job(s) (%d match, %d eligible; audit #%d)\n", b.done, res.Changed, res.Matched, res.Eligible, res.AuditID)
	}
	if res.More {
		if limit == 0 {
			limit = venturi.MaxBulkJobs
		}
		fmt.Fprintf(a.stdout, "the limit of %d stopped it: more eligible jobs remain; run it again\n", limit)
	}
	return nil
}
