package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		code int
		out  string // in stdout (exit 0) or stderr
	}{
		{nil, exitUsage, "commands:"},
		{[]string{"help"}, exitOK, "jobs list|show|retry|cancel|delete"},
		{[]string{"help", "jobs", "list"}, exitOK, "usage: venturi jobs list [flags] [FILTER...]"},
		{[]string{"help", "filter"}, exitOK, "payload.PATH:VALUE"},
		{[]string{"jobs", "retry", "--help"}, exitOK, "--dry-run"},
		{[]string{"jobs", "--help"}, exitOK, "show ID"},
		{[]string{"help", "nope"}, exitUsage, `unknown command "nope"`},
		{[]string{"nope"}, exitUsage, `venturi: unknown command "nope"`},
		{[]string{"jobs"}, exitUsage, "which one? list|show|retry|cancel|delete"},
		{[]string{"jobs", "nope"}, exitUsage, `venturi jobs: unknown command "nope"`},
		{[]string{"jobs", "list", "--nope"}, exitUsage, "flag provided but not defined: -nope"},
		{[]string{"jobs", "list", "--limit", "0"}, exitUsage, "--limit 0: want 1 to 500"},
		{[]string{"jobs", "show"}, exitUsage, "missing the job's ID"},
		{[]string{"jobs", "show", "not-a-ulid"}, exitUsage, `job ID "not-a-ulid": not a ULID`},
		{[]string{"jobs", "retry"}, exitUsage, "give job IDs or --filter"},
		{[]string{"jobs", "delete", "--filter", " "}, exitUsage, "would match every job"},
		{[]string{"jobs", "cancel", "--filter", "state:dead", "01J00000000000000000000000"}, exitUsage, "not both"},
		{[]string{"queues", "pause"}, exitUsage, "missing the queue's name"},
		{[]string{"queues", "limit", "q", "1", "2"}, exitUsage, `unexpected argument "2"`},
		{[]string{"queues", "limit", "q", "many"}, exitUsage, `limit "many": want a number`},
		{[]string{"cron", "pause"}, exitUsage, "missing the schedule's name"},
		{[]string{"circuits", "reset"}, exitUsage, "missing the circuit's kind"},
		{[]string{"audit", "--limit", "501"}, exitUsage, "--limit 501: want 1 to 500"},
		{[]string{"explain", "x"}, exitUsage, `job ID "x": not a ULID`},
		{[]string{"top", "--interval", "1ms"}, exitUsage, "want at least 100ms"},
		{[]string{"migrate", "status", "extra"}, exitUsage, `unexpected argument "extra"`},
	} {
		r := runBinary(t, "", "", tt.args...)
		out := r.stdout
		if tt.code != exitOK {
			out = r.stderr
		}
		if r.code != tt.code || !strings.Contains(out, tt.out) {
			t.Errorf("venturi %s: want exit %d and %q, got %s", strings.Join(tt.args, " "), tt.code, tt.out, r)
		}
		if tt.code == exitUsage && len(tt.args) > 1 && !strings.Contains(r.stderr, "usage: venturi") {
			t.Errorf("venturi %s: a usage error prints the usage: %s", strings.Join(tt.args, " "), r)
		}
	}
}

func TestNoDatabaseURL(t *testing.T) {
	t.Parallel()
	r := runBinary(t, "", "", "queues", "list")
	if r.code != exitError || !strings.Contains(r.stderr, "DATABASE_URL is not set") {
		t.Fatalf("want exit 1 and a message about DATABASE_URL: %s", r)
	}
}

// A password in DATABASE_URL is never printed: not in a connection error, not in a parse
// error, not in a header.
func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-Pa55word"
	u, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), secret) // the wrong password
	for _, dbURL := range []string{
		u.String(),
		"postgres://someone:" + secret + "@127.0.0.1:notaport/db",
		"postgres://someone:" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=5",
		"postgres://someone:%40" + secret + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=5", // percent-encoded
	} {
		for _, args := range [][]string{{"queues", "list"}, {"migrate", "status"}, {"top", "--once"}} {
			r := runBinary(t, dbURL, "", args...)
			if r.code != exitError {
				t.Errorf("venturi %v with a bad URL: want exit 1, got %s", args, r)
			}
			lacks(t, r.stdout+r.stderr, secret)
		}
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	e := newBareEnv(t)
	all, err := venturi.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	// An empty schema: every migration pending, exit status 1 (like River's validate).
	r := e.fails(exitError, "migrate", "status")
	contains(t, r, "pending", fmt.Sprintf("%d migration(s) pending", len(all)))
	var st struct {
		Schema     string
		Pending    int
		Migrations []venturi.MigrationState
	}
	if r := e.run("migrate", "status", "--json"); r.code != exitError {
		t.Fatalf("migrate status --json: want exit 1: %s", r)
	}

	r = e.ok("migrate", "up")
	contains(t, r, fmt.Sprintf("applied %d migration(s)", len(all)), e.schema)
	r = e.ok("migrate", "status")
	contains(t, r, "up to date", all[len(all)-1].Name)
	lacks(t, r.stdout, "pending")
	e.okJSON(&st, "migrate", "status")
	if st.Pending != 0 || len(st.Migrations) != len(all) || !st.Migrations[0].Applied || st.Migrations[0].AppliedAt == nil {
		t.Fatalf("migrate status --json: %+v", st)
	}
	contains(t, e.ok("migrate", "up"), "up to date")

	// --schema names the schema instead of the URL's search_path.
	other := testdb.Schema(t)
	if r := e.run("migrate", "status", "--schema", other); r.code != exitError {
		t.Fatalf("migrate status --schema (empty schema): want exit 1: %s", r)
	}
	e.ok("migrate", "up", "--schema", other)
	e.ok("migrate", "status", "--schema", other)
}

func TestJobsList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	r := f.ok("jobs", "list", "state:dead")
	contains(t, r, "cli_dead", "dead", "boom")
	lacks(t, r.stdout, "cli_ok")
	if n := lines(r.stdout); n != 3 { // the header and two jobs
		t.Fatalf("jobs list state:dead: want 2 jobs: %s", r)
	}

	var page struct {
		Jobs []venturi.JobSummary
		Next string
	}
	f.okJSON(&page, "jobs", "list", "kind:cli_ok", "state:completed")
	if len(page.Jobs) != 3 || page.Next != "" {
		t.Fatalf("jobs list kind:cli_ok state:completed --json: %+v", page)
	}
	for _, j := range page.Jobs {
		if j.Kind != "cli_ok" || j.State != venturi.StateCompleted || j.LastEvent != venturi.EventCompleted {
			t.Fatalf("jobs list --json: %+v", j)
		}
	}

	// Pages: --limit, then --cursor from the hint on stderr (4 jobs: 3 completed, 1 scheduled).
	r = f.ok("jobs", "list", "kind:cli_ok", "--limit", "3")
	if lines(r.stdout) != 4 || !strings.Contains(r.stderr, "--cursor ") {
		t.Fatalf("jobs list --limit 3: want 3 jobs and a cursor: %s", r)
	}
	cursor := strings.Fields(r.stderr[strings.Index(r.stderr, "--cursor ")+len("--cursor "):])[0]
	r = f.ok("jobs", "list", "kind:cli_ok", "--limit", "3", "--cursor", cursor)
	if lines(r.stdout) != 2 || strings.Contains(r.stderr, "--cursor") {
		t.Fatalf("jobs list --cursor: want the last job: %s", r)
	}

	// A note with a space, as the shell passes note:"connection refused".
	r = f.ok("jobs", "list", "note:connection refused")
	if lines(r.stdout) != 3 {
		t.Fatalf("jobs list note:connection refused: want the 2 dead jobs: %s", r)
	}
	contains(t, f.ok("jobs", "list", "queue:mail"), f.mail.String())
	contains(t, f.ok("jobs", "list", "id:"+f.scheduled.String()), "scheduled")

	// A bad filter is a usage error that names the bad term.
	r = f.fails(exitUsage, "jobs", "list", "color:red")
	if !strings.Contains(r.stderr, "color") {
		t.Fatalf("jobs list color:red: the error names the key: %s", r)
	}
}

func TestJobsShowAndExplain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	r := f.ok("jobs", "show", f.dead[0].String())
	contains(t, r, f.dead[0].String(), "cli_dead", "dead", "runs:", "boom 0: connection refused", "explain:")
	r = f.ok("jobs", "show", f.completed[1].String())
	contains(t, r, "done 1", `{"n":1}`) // the note and the attachment

	var d venturi.JobDetail
	f.okJSON(&d, "jobs", "show", f.dead[1].String())
	if d.ID != f.dead[1] || d.State != venturi.StateDead || len(d.Runs) != 1 || d.Runs[0].Event != venturi.EventDead {
		t.Fatalf("jobs show --json: %+v", d)
	}

	// Steps, hooks, carry and signals: a job that waits for a signal, then gets it.
	stop := f.startWorker()
	waiting := f.enqueue(waitTask{})
	f.waitState(waiting, venturi.StateWaiting)
	stop()
	if _, err := f.q.Signal(t.Context(), waiting, "confirm", map[string]bool{"ok": true}, "req-1"); err != nil {
		t.Fatal(err)
	}
	r = f.ok("jobs", "show", waiting.String())
	contains(t, r, "steps:", "fetch", `"page-1"`, "hooks:", "approve", "signals:", "confirm", "req-1", `{"ok":true}`, "pending",
		`{"stage":"awaiting approval"}`, "waiting")
	f.okJSON(&d, "jobs", "show", waiting.String())
	if len(d.Steps) != 1 || len(d.Hooks) != 1 || len(d.Signals) != 1 || d.Signals[0].ConsumedAt != nil {
		t.Fatalf("jobs show --json of the waiting job: %+v", d)
	}

	r = f.fails(exitError, "jobs", "show", "01J00000000000000000000000")
	if !strings.Contains(r.stderr, "not found") {
		t.Fatalf("jobs show of an unknown job: %s", r)
	}

	r = f.ok("explain", f.scheduled.String())
	contains(t, r, "explain:")
	var ex venturi.JobExplanation
	f.okJSON(&ex, "explain", f.scheduled.String())
	if len(ex.Reasons) == 0 {
		t.Fatalf("explain of a job due in an hour says nothing: %+v", ex)
	}
	f.fails(exitError, "explain", "01J00000000000000000000000")
}

func TestJobsRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	r := f.ok("jobs", "retry", "--filter", "state:dead", "--dry-run")
	contains(t, r, "would retry 2 job(s)")
	for _, id := range f.dead {
		if s := f.job(id).State; s != venturi.StateDead {
			t.Fatalf("a dry run changed job %s to %s", id, s)
		}
	}
	var dry struct {
		DryRun   bool
		Eligible int
		Changed  int
	}
	f.okJSON(&dry, "jobs", "retry", "--filter", "state:dead", "--dry-run")
	if !dry.DryRun || dry.Eligible != 2 || dry.Changed != 0 {
		t.Fatalf("jobs retry --dry-run --json: %+v", dry)
	}

	// Over a filter without --yes, and stdin no terminal: refused, nothing changed.
	r = f.fails(exitUsage, "jobs", "retry", "--filter", "state:dead")
	if !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("jobs retry --filter without --yes: %s", r)
	}

	r = f.ok("jobs", "retry", "--filter", "state:dead kind:cli_dead", "--yes", "--reason", "fixed the DNS", "--actor", "alice")
	contains(t, r, "retried 2 job(s)")
	for _, id := range f.dead {
		j := f.job(id)
		if j.State != venturi.StateAvailable || j.Failures != 0 {
			t.Fatalf("retried job %s: state %s, %d failures", id, j.State, j.Failures)
		}
	}
	// By ID, with the default actor ($USER@hostname).
	r = f.ok("jobs", "retry", f.completed[0].String())
	contains(t, r, "retried 1 job(s)")
	if s := f.job(f.completed[0]).State; s != venturi.StateAvailable {
		t.Fatalf("retried completed job: %s", s)
	}

	var audit struct{ Entries []venturi.AuditEntry }
	f.okJSON(&audit, "audit")
	if len(audit.Entries) != 2 {
		t.Fatalf("audit: want the 2 retries: %+v", audit)
	}
	byID, byFilter := audit.Entries[0], audit.Entries[1] // newest first
	if byFilter.Action != "jobs.retry" || byFilter.Actor != "alice" || byFilter.Count != 2 || byFilter.Reason != "fixed the DNS" {
		t.Fatalf("audit entry of the filtered retry: %+v", byFilter)
	}
	if byID.Action != "jobs.retry" || !strings.HasPrefix(byID.Actor, "tester@") || byID.Count != 1 {
		t.Fatalf("audit entry of the retry by ID: %+v", byID)
	}
	r = f.ok("audit", "--limit", "1")
	contains(t, r, "jobs.retry", "tester@")
	if !strings.Contains(r.stderr, fmt.Sprintf("--before %d", byID.ID)) {
		t.Fatalf("audit --limit 1: want the next page's hint: %s", r)
	}
	r = f.ok("audit", "--before", fmt.Sprint(byID.ID))
	contains(t, r, "alice", "fixed the DNS")

	// An available job is not eligible: exit 1, and it says so.
	r = f.fails(exitError, "jobs", "retry", f.mail.String())
	if !strings.Contains(r.stderr, "1 of the 1 jobs given were not retried") {
		t.Fatalf("retry of an available job: %s", r)
	}
}

func TestJobsCancelDelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	r := f.ok("jobs", "cancel", f.scheduled.String(), f.mail.String(), "--reason", "not needed")
	contains(t, r, "cancelled 2 job(s)")
	f.waitState(f.scheduled, venturi.StateCancelled)
	f.waitState(f.mail, venturi.StateCancelled)
	// A finished job is not eligible.
	r = f.fails(exitError, "jobs", "cancel", f.completed[0].String())
	if !strings.Contains(r.stderr, "not cancelled") {
		t.Fatalf("cancel of a completed job: %s", r)
	}

	contains(t, f.ok("jobs", "delete", "--filter", "kind:cli_ok state:completed", "--dry-run"), "would delete 3 job(s)")
	contains(t, f.ok("jobs", "delete", "--filter", "kind:cli_ok state:completed", "--yes"), "deleted 3 job(s)")
	for _, id := range f.completed {
		if _, err := f.q.Job(t.Context(), id); !errors.Is(err, venturi.ErrNotFound) {
			t.Fatalf("deleted job %s: %v", id, err)
		}
	}
	contains(t, f.ok("jobs", "delete", f.dead[0].String()), "deleted 1 job(s)")
	if _, err := f.q.Job(t.Context(), f.dead[0]); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("deleted job: %v", err)
	}
	if s := f.job(f.dead[1]).State; s != venturi.StateDead {
		t.Fatalf("the other dead job: %s", s)
	}
}

// The confirmation on a terminal: the dry run's count, then y goes ahead and anything
// else changes nothing. (In process: a subprocess's stdin is no terminal.)
func TestBulkConfirm(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	run := func(answer string, args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		a := &app{stdin: strings.NewReader(answer), stdout: &out, stderr: &errOut, stdinTTY: true,
			getenv: func(k string) string {
				if k == "DATABASE_URL" {
					return f.url
				}
				return ""
			}}
		code := a.run(context.Background(), args)
		return out.String(), errOut.String(), code
	}
	_, stderr, code := run("n\n", "jobs", "retry", "--filter", "state:dead")
	if code != exitError || !strings.Contains(stderr, "retry 2 job(s) matching state:dead") || !strings.Contains(stderr, "not confirmed") {
		t.Fatalf("answer n: exit %d, stderr %s", code, stderr)
	}
	if s := f.job(f.dead[0]).State; s != venturi.StateDead {
		t.Fatalf("not confirmed, yet the job is %s", s)
	}
	stdout, stderr, code := run("y\n", "jobs", "retry", "--filter", "state:dead")
	if code != exitOK || !strings.Contains(stdout, "retried 2 job(s)") {
		t.Fatalf("answer y: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	stdout, _, code = run("", "jobs", "retry", "--filter", "state:dead")
	if code != exitOK || !strings.Contains(stdout, "no job to retry") {
		t.Fatalf("nothing eligible: exit %d, stdout %s", code, stdout)
	}
}

func TestQueues(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	queue := func(name string) venturi.QueueState {
		qs, err := f.q.Queues(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range qs {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no queue %s in %+v", name, qs)
		return venturi.QueueState{}
	}

	r := f.ok("queues", "list")
	contains(t, r, "mail", "active")
	contains(t, f.ok("queues", "pause", "mail"), "queue mail paused")
	if !queue("mail").Paused {
		t.Fatal("queues pause: Queue.Queues says mail is not paused")
	}
	var list struct{ Queues []venturi.QueueState }
	f.okJSON(&list, "queues", "list")
	found := false
	for _, s := range list.Queues {
		if s.Name == "mail" {
			found = s.Paused && s.Available == 1
		}
	}
	if !found {
		t.Fatalf("queues list --json: %+v", list)
	}
	f.ok("queues", "resume", "mail")
	if queue("mail").Paused {
		t.Fatal("queues resume: still paused")
	}
	contains(t, f.ok("queues", "limit", "mail", "3"), "concurrency 3")
	if c := queue("mail").Concurrency; c != 3 {
		t.Fatalf("queues limit: concurrency %d", c)
	}
	f.ok("queues", "limit", "mail", "0")
	if c := queue("mail").Concurrency; c != 0 {
		t.Fatalf("queues limit 0: concurrency %d", c)
	}
	f.fails(exitUsage, "queues", "limit", "mail", "-1")
	f.fails(exitUsage, "queues", "limit", "mail", "many")

	var audit struct{ Entries []venturi.AuditEntry }
	f.okJSON(&audit, "audit")
	if len(audit.Entries) == 0 || audit.Entries[len(audit.Entries)-1].Action != "queue.pause" || audit.Entries[0].Target != "mail" {
		t.Fatalf("audit of the queue actions: %+v", audit)
	}
}

func TestCron(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.q.Schedule(t.Context(), venturi.Schedule{Name: "nightly", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Task: okTask{N: 7}}); err != nil {
		t.Fatal(err)
	}
	r := e.ok("cron", "list")
	contains(t, r, "nightly", "0 2 * * *", "Europe/Berlin", "cli_ok", "active")
	contains(t, e.ok("cron", "pause", "nightly"), "schedule nightly paused")
	s, err := e.q.ScheduleByName(t.Context(), "nightly")
	if err != nil || !s.Paused {
		t.Fatalf("cron pause: %+v, %v", s, err)
	}
	var list struct{ Schedules []venturi.ScheduleInfo }
	e.okJSON(&list, "cron", "list")
	if len(list.Schedules) != 1 || !list.Schedules[0].Paused || list.Schedules[0].Kind != "cli_ok" {
		t.Fatalf("cron list --json: %+v", list)
	}
	e.ok("cron", "resume", "nightly")
	if s, _ := e.q.ScheduleByName(t.Context(), "nightly"); s.Paused {
		t.Fatal("cron resume: still paused")
	}
	r = e.fails(exitError, "cron", "pause", "weekly")
	if !strings.Contains(r.stderr, `no schedule named "weekly"`) {
		t.Fatalf("cron pause of an unknown schedule: %s", r)
	}
}

// flakyTask fails, and its breaker opens at the first failure.
type flakyTask struct{}

func (flakyTask) Kind() string { return "cli_flaky" }
func (flakyTask) Limits() venturi.Limits {
	return venturi.Limits{Breaker: venturi.Breaker{Failures: 1, Cooldown: time.Hour}}
}

func (flakyTask) Handle(context.Context, *venturi.Run[struct{}], deps) (venturi.Outcome, error) {
	return venturi.Outcome{}, errors.New("upstream down")
}

func TestCircuits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := venturi.NewWorker(e.pool, deps{}, workerConfig())
	if err != nil {
		t.Fatal(err)
	}
	venturi.MustRegister[flakyTask](w)
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		_ = w.Stop(ctx)
	})
	e.enqueue(flakyTask{})
	circuit := func() *venturi.Circuit {
		cs, err := e.q.Circuits(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Kind == "cli_flaky" {
				return &c
			}
		}
		return nil
	}
	eventually(t, "the breaker to open", func() bool { c := circuit(); return c != nil && c.State == venturi.CircuitOpen })

	r := e.ok("circuits", "list")
	contains(t, r, "cli_flaky", "open", "1/1")
	var list struct{ Circuits []venturi.Circuit }
	e.okJSON(&list, "circuits", "list")
	if len(list.Circuits) != 1 || list.Circuits[0].State != venturi.CircuitOpen {
		t.Fatalf("circuits list --json: %+v", list)
	}
	contains(t, e.ok("circuits", "reset", "cli_flaky"), "circuit cli_flaky closed")
	if c := circuit(); c == nil || c.State == venturi.CircuitOpen {
		t.Fatalf("circuits reset: %+v", c)
	}
}

func TestStatsAndTop(t *testing.T) {
	t.Parallel()
	empty := newEnv(t) // no worker has sampled
	contains(t, empty.ok("stats"), "no stats sample yet", "deferred merges waiting (enqueues from SQL for a worker to merge): none")
	contains(t, empty.ok("top", "--once"), "no stats sample yet")
	// Enqueues from SQL of a kind no worker registered (so its merge is left to Go) on one
	// key: the first inserts, the next two wait for a Go merge. stats lists them without a
	// sample, read live.
	for range 3 {
		if _, err := empty.pool.Exec(t.Context(), `SELECT venturi_enqueue('cli_sql_merge', '{}', dedup_key => 'k')`); err != nil {
			t.Fatal(err)
		}
	}
	r := empty.ok("stats")
	contains(t, r, "no stats sample yet", "deferred merges waiting", "KIND", "WAITING", "OLDEST AGE", "cli_sql_merge  2 ")
	var es venturi.Stats
	empty.okJSON(&es, "stats")
	if len(es.DeferredMerges) != 1 || es.DeferredMerges[0].Kind != "cli_sql_merge" || es.DeferredMerges[0].Waiting != 2 || es.DeferredMerges[0].Keys != 1 {
		t.Fatalf("stats --json: deferred merges %+v, want 2 of cli_sql_merge on 1 key", es.DeferredMerges)
	}

	f := newFixture(t)
	f.startWorker() // samples the stats table
	eventually(t, "a stats sample with the finished jobs", func() bool {
		s, err := f.q.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, qs := range s.Queues {
			if qs.Queue == venturi.DefaultQueue {
				return qs.Counts[venturi.StateCompleted] == 3 && qs.Counts[venturi.StateDead] == 2
			}
		}
		return false
	})
	r = f.ok("stats")
	contains(t, r, "sampled at", "QUEUE", "AVAILABLE", "mail", "default", "cli_dead", "cli_ok", "deferred merges waiting (enqueues from SQL for a worker to merge): none")
	var s venturi.Stats
	f.okJSON(&s, "stats")
	var mail *venturi.QueueStats
	for i := range s.Queues {
		if s.Queues[i].Queue == "mail" {
			mail = &s.Queues[i]
		}
	}
	if mail == nil || mail.Counts[venturi.StateAvailable] != 1 {
		t.Fatalf("stats --json: the mail queue has 1 available job: %+v", s)
	}

	r = f.ok("top", "--once")
	contains(t, r, "venturi top", f.schema, "QUEUE", "LAG", "mail", "default")
	lacks(t, r.stdout, "\x1b[") // no terminal: no escapes

	// Not once: frames until q arrives on stdin.
	r = f.runWith(f.url, "q\n", "top", "--interval", "100ms")
	if r.code != exitOK || !strings.Contains(r.stdout, "mail") {
		t.Fatalf("top, quit with q: %s", r)
	}
}
