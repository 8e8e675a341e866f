package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// commands is the command tree.
func commands() []*command {
	return []*command{
		{name: "migrate", summary: "apply venturi's migrations, or show which are pending", subs: []*command{
			{name: "up", summary: "apply the pending migrations", setup: migrateUp},
			{name: "status", summary: "list applied and pending migrations; exit status 1 when some are pending", setup: migrateStatus},
		}},
		{name: "jobs", summary: "list, show, retry, cancel and delete jobs", subs: []*command{
			{name: "list", args: "[FILTER...]", summary: "list the jobs that match a filter", detail: filterHelp, setup: jobsList},
			{name: "show", args: "ID", summary: "show one job: runs, carry, steps, signals, hooks, explanation", setup: jobsShow},
			bulkCommand(retryAction),
			bulkCommand(cancelAction),
			bulkCommand(deleteAction),
		}},
		{name: "workflows", summary: "list, show, cancel and retry workflows and batches", subs: []*command{
			{name: "list", summary: "list workflows and batches, newest first", detail: workflowsListHelp, setup: workflowsList},
			{name: "show", args: "ID", summary: "show one workflow or batch: its nodes with their states and outcomes, a batch's counts", setup: workflowsShow},
			{name: "cancel", args: "ID", summary: "cancel a workflow: its blocked nodes end, its released jobs are cancelled", setup: workflowsCancel},
			{name: "retry", args: "ID", summary: "run a workflow again from where it failed: its failed and cancelled jobs, and what they decided", setup: workflowsRetry},
		}},
		{name: "queues", summary: "list queues, pause and resume them, limit their concurrency", subs: []*command{
			{name: "list", summary: "list queues with their settings and job counts", setup: queuesList},
			{name: "pause", args: "NAME", summary: "pause a queue: no job of it starts until resume", setup: queuePause},
			{name: "resume", args: "NAME", summary: "resume a paused queue", setup: queueResume},
			{name: "limit", args: "NAME N", summary: "run at most N of the queue's jobs at once (0: no limit)", setup: queueLimit},
		}},
		{name: "cron", summary: "list, pause and resume cron schedules", subs: []*command{
			{name: "list", summary: "list schedules with their next and last fires", setup: cronList},
			{name: "pause", args: "NAME", summary: "pause a schedule", setup: cronPause},
			{name: "resume", args: "NAME", summary: "resume a schedule from its next fire after now", setup: cronResume},
		}},
		{name: "circuits", summary: "list circuit breakers, close one", subs: []*command{
			{name: "list", summary: "list circuit breakers and their state", setup: circuitsList},
			{name: "reset", args: "KIND [PARTITION]", summary: "close a circuit breaker now, its failures forgotten", setup: circuitReset},
		}},
		{name: "audit", summary: "list recorded operator actions, newest first", setup: auditList},
		{name: "stats", summary: "job counts by state, lag and rates per queue and kind (from the stats table)", setup: statsCmd},
		{name: "explain", args: "ID", summary: "say why a job is where it is and what happens next", setup: explainCmd},
		{name: "top", summary: "a live view of depth, lag and throughput per queue", setup: topCmd, detail: `It reads the stats table (never the job table) every --interval, and only the samples
it has not seen. On a terminal it redraws in place and q or Ctrl-C quits; piped, it
prints frame after frame, and a line "q" on stdin quits.`},
	}
}

// filterHelp documents the filter grammar, shared with venturi.ParseJobFilter.
const filterHelp = `A filter is terms separated by spaces, each KEY:VALUE; the arguments are joined
with spaces. A value with spaces or quotes is written in double quotes (Go syntax):
quote it for the shell too, 'note:"connection refused"' (an argument such as
note:"connection refused", which the shell passes as note:connection refused, is
quoted for you). Keys:
  id:ULID   state:STATE   kind:KIND   queue:NAME      repeated: any of them
  workflow:ULID (a workflow's or batch's jobs)
  key:DEDUPKEY            after:RFC3339   before:RFC3339   within:DURATION (created since)
  note:TEXT (in the recent journal's notes, any case)
  payload.PATH:VALUE   attachment.PATH:VALUE   (PATH: keys or array indexes, dot-separated)
States: scheduled available running waiting completed dead cancelled blocked (a
workflow's job that waits for the nodes it needs).
Example: venturi jobs list state:dead kind:fetch_page within:1h`

// workflowsListHelp says what workflows list reads.
const workflowsListHelp = `It walks the workflows newest first. No index serves --state, --kind or --name: with
one of them a page reads at most a window of workflows and may stop short of --limit;
it then says so, and --cursor searches on. venturi workflows show ID prints one with
its nodes; venturi jobs list workflow:ID lists its jobs.`

// help prints the help of the command named by args ("help jobs list"), or of all.
func (a *app) help(args []string) int {
	root := commands()
	if len(args) == 0 {
		a.printGroup(a.stdout, nil, root)
		return exitOK
	}
	if len(args) == 1 && args[0] == "filter" {
		fmt.Fprintln(a.stdout, filterHelp)
		return exitOK
	}
	path, cmd, rest := lookup(root, args)
	if cmd == nil || len(rest) > 0 {
		a.errorf("venturi help: unknown command %q", strings.Join(args, " "))
		a.printGroup(a.stderr, nil, root)
		return exitUsage
	}
	if cmd.setup == nil {
		a.printGroup(a.stdout, path, cmd.subs)
		return exitOK
	}
	fs := newFlagSet(joinPath(path))
	cmd.setup(a, fs)
	a.printLeaf(a.stdout, path, fs, true)
	return exitOK
}

// printGroup prints the usage of a group of commands (path empty: the whole tool).
func (a *app) printGroup(w io.Writer, path []*command, subs []*command) {
	name := joinPath(path)
	fmt.Fprintf(w, "usage: %s COMMAND [flags] [arguments]\n\n", name)
	if len(path) == 0 {
		fmt.Fprintln(w, "venturi operates a venturi queue. It connects to DATABASE_URL; the schema is the")
		fmt.Fprintln(w, "URL's search_path, or --schema.")
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "commands:")
	for _, c := range subs {
		usage := c.name
		if c.args != "" {
			usage += " " + c.args
		}
		if c.setup == nil {
			usage += " " + subNames(c.subs)
		}
		fmt.Fprintf(w, "  %-34s %s\n", usage, c.summary)
	}
	if len(path) == 0 {
		fmt.Fprint(w, "\n`venturi help COMMAND` (or venturi COMMAND --help) describes a command")
		fmt.Fprint(w, "; `venturi help filter` the filter grammar")
	} else {
		fmt.Fprintf(w, "\n`venturi help %s COMMAND` (or %s COMMAND --help) describes a command", strings.TrimPrefix(name, "venturi "), name)
	}
	fmt.Fprintln(w, ".")
}

// printLeaf prints the usage of a command and its flags; full adds its description
// (help), which a usage error leaves out.
func (a *app) printLeaf(w io.Writer, path []*command, fs *flag.FlagSet, full bool) {
	cmd := path[len(path)-1]
	fmt.Fprintf(w, "usage: %s [flags]", joinPath(path))
	if cmd.args != "" {
		fmt.Fprintf(w, " %s", cmd.args)
	}
	fmt.Fprintln(w)
	if full {
		fmt.Fprintf(w, "\n%s.\n", upperFirst(cmd.summary))
		if cmd.detail != "" {
			fmt.Fprintf(w, "\n%s\n", cmd.detail)
		}
	}
	var flags strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		head := "--" + f.Name
		if typ != "" {
			head += " " + typ
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(&flags, "  %-22s %s%s\n", head, usage, def)
	})
	if flags.Len() > 0 {
		fmt.Fprintf(w, "\nflags:\n%s", flags.String())
	}
	if !full {
		fmt.Fprintf(w, "\n`venturi help %s` describes it.\n", strings.TrimPrefix(joinPath(path), "venturi "))
	}
}

// joinPath names a command: "venturi jobs list".
func joinPath(path []*command) string {
	parts := []string{"venturi"}
	for _, c := range path {
		parts = append(parts, c.name)
	}
	return strings.Join(parts, " ")
}

// subNames lists a group's subcommands: "list|show|retry".
func subNames(subs []*command) string {
	names := make([]string, len(subs))
	for i, c := range subs {
		names[i] = c.name
	}
	return strings.Join(names, "|")
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
