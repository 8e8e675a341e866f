package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// ---- workflows and batches ---------------------------------------------------------------

// workflowID parses a workflow's ID argument.
func workflowID(s string) (ulid.ULID, error) {
	id, err := ulid.ParseStrict(s)
	if err != nil {
		return id, usagef("workflow ID %q: not a ULID", s)
	}
	return id, nil
}

// oneWorkflowID checks that the arguments are one workflow ID.
func oneWorkflowID(args []string) error {
	if err := nArgs(args, 1, 1, "the workflow's ID"); err != nil {
		return err
	}
	_, err := workflowID(args[0])
	return err
}

// workflowFlags reads workflows list's flags into a filter.
type workflowFlags struct {
	states, kind, name, after, before string
	within                            time.Duration
}

func (w *workflowFlags) filter() (venturi.WorkflowFilter, error) {
	f := venturi.WorkflowFilter{Kind: venturi.WorkflowKind(w.kind), NamePrefix: w.name, CreatedWithin: w.within}
	for s := range strings.SplitSeq(w.states, ",") {
		if s = strings.TrimSpace(s); s != "" {
			f.States = append(f.States, venturi.WorkflowState(s))
		}
	}
	for _, b := range []struct {
		flag, text string
		to         *time.Time
	}{{"--after", w.after, &f.CreatedAfter}, {"--before", w.before, &f.CreatedBefore}} {
		if b.text == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, b.text)
		if err != nil {
			return f, usagef("%s %q: want an RFC 3339 time, such as 2026-01-02T15:04:05Z", b.flag, b.text)
		}
		*b.to = t
	}
	if w.within < 0 {
		return f, usagef("--within %v: want a positive duration", w.within)
	}
	return f, nil
}

func workflowsList(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, true)
	w := &workflowFlags{}
	fs.StringVar(&w.states, "state", "", "list workflows in these states, comma-separated: open, succeeded, failed, cancelled")
	fs.StringVar(&w.kind, "kind", "", "list only workflows (workflow) or only batches (batch)")
	fs.StringVar(&w.name, "name", "", "list workflows whose name starts with this")
	fs.DurationVar(&w.within, "within", 0, "list workflows created less than this long ago (90m, 24h)")
	fs.StringVar(&w.after, "after", "", "list workflows created at or after this time (RFC 3339)")
	fs.StringVar(&w.before, "before", "", "list workflows created before this time (RFC 3339)")
	limit := fs.Int("limit", 50, fmt.Sprintf("the most workflows to list (at most %d)", venturi.MaxListPage))
	cursor := fs.String("cursor", "", "list the page after this cursor (printed after a full page)")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if *limit < 1 || *limit > venturi.MaxListPage {
			return usagef("--limit %d: want 1 to %d", *limit, venturi.MaxListPage)
		}
		f, err := w.filter()
		if err != nil {
			return err
		}
		q, err := a.connect(ctx, c.schema)
		if err != nil {
			return err
		}
		page, err := q.ListWorkflows(ctx, f, *cursor, *limit)
		if errors.Is(err, venturi.ErrInvalidFilter) {
			return usagef("%v", err)
		}
		if err != nil {
			return err
		}
		if c.json {
			return writeJSON(a.stdout, struct {
				Workflows []venturi.WorkflowSummary
				Next      string
				Partial   bool `json:",omitempty"`
			}{orEmpty(page.Workflows), page.Next, page.Partial})
		}
		t := newTable(a.stdout, "ID", "KIND", "NAME", "STATE", "NODES", "OPEN", "ATTEMPT", "CREATED", "FINISHED")
		for _, wf := range page.Workflows {
			state := string(wf.State)
			if wf.CancelRequestedAt != nil && wf.State == venturi.WorkflowOpen {
				state += " (cancelling)"
			}
			t.row(wf.ID.String(), string(wf.Kind), clip(wf.Name, 40), state, fmt.Sprint(wf.Nodes), fmt.Sprint(wf.OpenNodes),
				fmt.Sprint(wf.Attempt), timeText(wf.CreatedAt), timePtrText(wf.FinishedAt))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if page.Partial {
			fmt.Fprintf(a.stderr, "searched %d more workflows (no index serves a state, kind or name match) and stopped there\n", venturi.ListWorkflowsWindow)
		}
		if page.Next != "" {
			fmt.Fprintf(a.stderr, "more: venturi workflows list --cursor %s ...\n", page.Next)
		}
		return nil
	}
}

func workflowsShow(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	c := connFlags(fs, true)
	limit := fs.Int("nodes", 200, fmt.Sprintf("the most nodes to show (at most %d)", venturi.MaxDetailNodes))
	after := fs.String("after", "", "show the nodes whose names sort after this one (printed when more remain)")
	check := func(args []string) error {
		if *limit < 1 || *limit > venturi.MaxDetailNodes {
			return usagef("--nodes %d: want 1 to %d", *limit, venturi.MaxDetailNodes)
		}
		return oneWorkflowID(args)
	}
	return readCommand(a, c, check, func(ctx context.Context, q *venturi.Queue, args []string) (*venturi.WorkflowDetail, error) {
		id, _ := workflowID(args[0])
		d, err := q.WorkflowDetail(ctx, id, *after, *limit)
		if errors.Is(err, venturi.ErrWorkflowNotFound) {
			return nil, fmt.Errorf("workflow %s: not found (unknown, or pruned after it finished)", id)
		}
		if err == nil && d.NodeList == nil {
			d.NodeList = []venturi.NodeInfo{}
		}
		return d, err
	}, func(w io.Writer, d *venturi.WorkflowDetail) error {
		if err := printWorkflow(w, d); err != nil {
			return err
		}
		if d.NextNode != "" {
			fmt.Fprintf(a.stderr, "more nodes: venturi workflows show %s --after %s\n", d.ID, quoteArg(d.NextNode))
		}
		return nil
	})
}

// quoteArg quotes a shell argument when it holds more than letters, digits and -_./:.
func quoteArg(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// printWorkflow prints a workflow's detail as text: its facts, a batch's counts, and its
// nodes.
func printWorkflow(w io.Writer, d *venturi.WorkflowDetail) error {
	k := newKV(w)
	k.add("id", d.ID.String())
	k.add("kind", string(d.Kind))
	k.add("name", d.Name)
	k.add("key", d.Key)
	k.add("state", string(d.State))
	if d.CancelRequestedAt != nil {
		k.add("cancel requested", strings.TrimSuffix(timePtrText(d.CancelRequestedAt)+": "+d.CancelNote, ": "))
	}
	if d.FailFast {
		k.add("fail fast", "yes")
	}
	k.add("attempt", fmt.Sprint(d.Attempt))
	k.add("nodes", fmt.Sprintf("%d (%d not ended)", d.Nodes, d.OpenNodes))
	k.add("created", timeText(d.CreatedAt))
	k.add("finished", timePtrText(d.FinishedAt))
	if b := d.Batch; b != nil {
		sealed := "sealed"
		if !b.Sealed {
			sealed = "open: takes members until SealBatch"
		}
		k.add("members", fmt.Sprintf("%d: %d succeeded, %d failed, %d cancelled, %d pending (%s)",
			b.Total, b.Succeeded, b.Failed, b.Cancelled, b.Pending, sealed))
	}
	if err := k.flush(); err != nil {
		return err
	}
	if len(d.NodeList) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nnodes:")
	t := newTable(w, "  NODE", "JOB", "STATE", "OWN", "OUTCOME", "NEEDS", "IN", "WAITING")
	for _, n := range d.NodeList {
		job, state := "group", ""
		if !n.Group {
			job, state = n.JobID.String(), string(n.JobState)
		}
		needs := ""
		if len(n.Needs) > 0 {
			needs = n.Policy.String() + ": " + strings.Join(n.Needs, ",")
		}
		waiting := ""
		if n.Waiting > 0 || n.Holds > 0 {
			waiting = fmt.Sprintf("%d needed, %d attached", n.Waiting, n.Holds)
		}
		t.row("  "+clip(n.Name, 40), job, state, n.Own, n.Outcome, clip(needs, 60), clip(n.In, 40), waiting)
	}
	return t.flush()
}

// actorReason is the note a workflow action journals: who acted ("cancelled by alice"),
// and why.
func actorReason(verb, actor, reason string) string {
	note := strings.TrimSpace(verb + " by " + actor)
	if reason != "" {
		note += ": " + reason
	}
	return note
}

func workflowsCancel(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	reason := fs.String("reason", "", "why: written in the journal of each job it ends")
	actor := actorFlag(a, fs)
	return readCommand(a, connFlags(fs, false), oneWorkflowID, func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		id, _ := workflowID(args[0])
		err := q.CancelWorkflow(venturi.WithActor(ctx, *actor), id, actorReason("cancelled", *actor, *reason))
		if errors.Is(err, venturi.ErrWorkflowFinished) {
			return "", fmt.Errorf("workflow %s is not open (it has finished, or there is none): nothing to cancel", id)
		}
		return fmt.Sprintf("workflow %s cancelled: its blocked nodes ended, its released jobs were cancelled (running ones are asked to stop)", id), err
	}, printLine)
}

func workflowsRetry(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
	reason := fs.String("reason", "", "why: written in the journal of each job it retries")
	actor := actorFlag(a, fs)
	return readCommand(a, connFlags(fs, false), oneWorkflowID, func(ctx context.Context, q *venturi.Queue, args []string) (string, error) {
		id, _ := workflowID(args[0])
		n, err := q.RetryWorkflow(venturi.WithActor(ctx, *actor), id, actorReason("", *actor, *reason))
		switch {
		case errors.Is(err, venturi.ErrWorkflowNotFound):
			return "", fmt.Errorf("workflow %s: not found (unknown, or pruned after it finished)", id)
		case err != nil:
			return "", err
		case n == 0:
			return fmt.Sprintf("workflow %s: no job had failed or was cancelled; nothing to run again", id), nil
		}
		return fmt.Sprintf("workflow %s retried: %d job(s) run again once what they need allows", id, n), nil
	}, printLine)
}

// printLine prints a command's one-line report.
func printLine(w io.Writer, msg string) error {
	_, err := fmt.Fprintln(w, msg)
	return err
}
