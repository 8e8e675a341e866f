package venturi_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// seedDead inserts n dead jobs of opsTask (which completes when run) that failed 25 times.
func seedDead(t *testing.T, pool *pgxpool.Pool, n int, queue string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `
		INSERT INTO venturi_job (id, kind, queue, state, payload, run_at, runs, failures, attempted_at, finished_at, journal)
		SELECT (lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0') || lpad(to_hex(i), 20, '0'))::uuid,
		       'ops', $2, 'dead', jsonb_build_object('n', i), now(), 25, 25, now(), now() - interval '1 minute',
		       jsonb_build_array(jsonb_build_object('event', 'dead', 'run', 25, 'note', 'backstop reached', 'at', now()))
		FROM generate_series(1, $1) i`, n, queue); err != nil {
		t.Fatal(err)
	}
}

// TestRetryJobsWhileAWorkerDrains: a bulk retry of 2,500 dead jobs (three batches) with a
// worker draining them as they become available: each is retried once, with its failures
// forgotten and a retried entry naming the actor and reason, then completes; one audit
// entry counts them all.
func TestRetryJobsWhileAWorkerDrains(t *testing.T) {
	t.Parallel()
	ctx := venturi.WithActor(context.Background(), "alice")
	pool, q := newQueue(t)
	const n = 2500
	seedDead(t, pool, n, venturi.DefaultQueue)
	cfg := fastConfig()
	cfg.Concurrency = 20
	startOpsWorker(t, pool, cfg)
	res, err := q.RetryJobs(ctx, mustFilter(t, "state:dead kind:ops"), venturi.BulkOptions{Reason: "the API is back"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != n || res.Eligible != n || res.Changed != n || res.More || res.AuditID == 0 {
		t.Fatalf("retry: %+v", res)
	}
	eventually(t, within, "every retried job completed", func() bool { return countJobs(t, pool, "state = 'completed'") == n })
	if bad := countJobs(t, pool, `failures <> 0 OR runs <> 26 OR NOT (journal -> -2 @> '{"event": "retried", "note": "retried by alice: the API is back"}')
		OR journal -> -1 ->> 'event' <> 'completed'`); bad != 0 {
		t.Fatalf("%d jobs without a retried entry before their completion, or with failures left", bad)
	}
	log := auditEntries(t, q)
	if len(log) != 1 || log[0].ID != res.AuditID || log[0].Actor != "alice" || log[0].Action != venturi.AuditJobsRetry ||
		log[0].Target != "state:dead kind:ops" || log[0].Count != n || log[0].Reason != "the API is back" {
		t.Fatalf("audit: %+v", log)
	}
}

// TestBulkDryRunAndLimit: a dry run counts and changes nothing (no audit entry); a limit
// stops the action and says more remain; a filter that matches nothing is still audited.
func TestBulkDryRunAndLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	seedDead(t, pool, 5, "media")
	enqueue(t, q, opsTask{N: 1, Q: "media"}) // available: matched, not eligible for retry
	f := mustFilter(t, "queue:media")
	dry, err := q.RetryJobs(ctx, f, venturi.BulkOptions{DryRun: true})
	if err != nil || dry != (venturi.BulkResult{Matched: 6, Eligible: 5}) {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	dry, err = q.DeleteJobs(ctx, f, venturi.BulkOptions{DryRun: true, Limit: 2})
	if err != nil || dry.Eligible != 2 || !dry.More || dry.Changed != 0 {
		t.Fatalf("dry run with a limit: %+v, %v", dry, err)
	}
	dry, err = q.RetryJobs(ctx, f, venturi.BulkOptions{DryRun: true, CountMax: 4})
	if err != nil || dry.Matched != 4 || !dry.CountStopped || !dry.More || dry.Eligible > 4 {
		t.Fatalf("dry run with a count bound: %+v, %v", dry, err)
	}
	if n := countJobs(t, pool, "state = 'dead'"); n != 5 || len(auditEntries(t, q)) != 0 {
		t.Fatalf("a dry run changed something: %d dead, audit %v", n, auditEntries(t, q))
	}
	res, err := q.RetryJobs(ctx, f, venturi.BulkOptions{Limit: 3})
	if err != nil || res.Changed != 3 || !res.More || res.Eligible != 3 {
		t.Fatalf("limited: %+v, %v", res, err)
	}
	if n := countJobs(t, pool, "state = 'dead'"); n != 2 {
		t.Fatalf("%d dead left, want 2", n)
	}
	none, err := q.CancelJobs(ctx, mustFilter(t, "kind:nothing"), venturi.BulkOptions{})
	if err != nil || none.Matched != 0 || none.AuditID == 0 {
		t.Fatalf("empty cancel: %+v, %v", none, err)
	}
	if log := auditEntries(t, q); len(log) != 2 || log[0].Action != venturi.AuditJobsCancel || log[0].Count != 0 ||
		log[0].Actor != "unknown" || log[1].Count != 3 {
		t.Fatalf("audit: %+v", log)
	}
}

// opsBlock runs until its run is asked to stop (or shut down).
type opsBlock struct {
	N int `json:"n"`
}

func (opsBlock) Kind() string { return "ops_block" }

func (opsBlock) Handle(ctx context.Context, run *venturi.Run[struct{}], started chan<- ulid.ULID) (venturi.Outcome, error) {
	started <- run.ID()
	select {
	case <-run.Shutdown():
	case <-ctx.Done():
	}
	return venturi.Outcome{}, errors.New("stopped")
}

// TestCancelJobsStopsRunningOnes: a bulk cancel ends pending jobs at once and asks running
// ones to stop, by the cancel path: the run sees Shutdown and its job ends cancelled with
// the reason.
func TestCancelJobsStopsRunningOnes(t *testing.T) {
	t.Parallel()
	ctx := venturi.WithActor(context.Background(), "bob")
	pool, q := newQueue(t)
	started := make(chan ulid.ULID, 10)
	w := newWorker(t, pool, (chan<- ulid.ULID)(started), fastConfig())
	venturi.MustRegister[opsBlock](w)
	startWorker(t, w)
	running := enqueue(t, q, opsBlock{N: 1})
	recv(t, started, "the job to start")
	later := enqueue(t, q, opsBlock{N: 2}, venturi.After(time.Hour))
	res, err := q.CancelJobs(ctx, mustFilter(t, "kind:ops_block"), venturi.BulkOptions{Reason: "incident 7"})
	if err != nil || res.Matched != 2 || res.Eligible != 2 || res.Changed != 2 {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	j := waitState(t, q, running, venturi.StateCancelled)
	if e := lastEntry(j); e.Event != venturi.EventCancelled || !strings.HasPrefix(e.Note, "cancelled by bob: incident 7") {
		t.Fatalf("running job's entry %+v", e)
	}
	if j := jobByID(t, q, later.ID); j.State != venturi.StateCancelled || lastEntry(j).Note != "cancelled by bob: incident 7" {
		t.Fatalf("pending job %+v", j)
	}
	again, err := q.CancelJobs(ctx, mustFilter(t, "kind:ops_block"), venturi.BulkOptions{})
	if err != nil || again.Eligible != 0 || again.Changed != 0 {
		t.Fatalf("second cancel: %+v, %v", again, err)
	}
}

// TestBulkActionsRaceAWorker: bulk cancels and retries over jobs that a worker claims and
// finishes at the same time: every job ends completed or cancelled, each as its journal
// says, none left with a lease or in between.
func TestBulkActionsRaceAWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	var tasks []venturi.Task
	for i := range 600 {
		tasks = append(tasks, opsTask{N: i, Fail: i % 2, Dead: true}) // half die at once
	}
	if _, err := q.EnqueueMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	cfg.Concurrency = 8
	startOpsWorker(t, pool, cfg)
	var wg sync.WaitGroup
	var changed [2]int
	var errs [2]error
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 5 {
			r, err := q.RetryJobs(ctx, mustFilter(t, "state:dead"), venturi.BulkOptions{})
			changed[0] += r.Changed
			if err != nil {
				errs[0] = err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		r, err := q.CancelJobs(ctx, mustFilter(t, "kind:ops"), venturi.BulkOptions{})
		changed[1], errs[1] = r.Changed, err
	}()
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("bulk actions: %v", errs)
	}
	eventually(t, within, "every job to end", func() bool {
		return countJobs(t, pool, "state IN ('completed', 'cancelled', 'dead')") == 600
	})
	if bad := countJobs(t, pool, `lease_token IS NOT NULL OR finished_at IS NULL
		OR (state = 'completed' AND journal -> -1 ->> 'event' <> 'completed')
		OR (state = 'cancelled' AND journal -> -1 ->> 'event' <> 'cancelled')
		OR (state = 'dead' AND journal -> -1 ->> 'event' <> 'dead')`); bad != 0 {
		t.Fatalf("%d jobs whose state, lease and journal disagree", bad)
	}
	if changed[1] == 0 {
		t.Logf("the cancel found nothing pending (the worker was faster); retries changed %d", changed[0])
	}
}

// TestDeleteJobsTakesTheExtras: a bulk delete removes the jobs that are not running with
// their moved journal, signals, hooks and steps, and leaves the running ones.
func TestDeleteJobsTakesTheExtras(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	id := seed(t, pool, seedJob{state: "waiting", runAt: time.Hour}, seedJob{state: "completed"}, seedJob{state: "running", lease: time.Hour})
	for _, j := range id {
		if _, err := pool.Exec(ctx, `
			INSERT INTO venturi_signal (job_id, name, payload, delivery_id) VALUES ($1, 'go', '{}', 'd1');
			`, j[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO venturi_step (job_id, name, result, run, token) VALUES ($1, 's', '1', 1, 1)`, j[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO venturi_hook (token_hash, job_id, name, expires_at) VALUES (sha256($2::bytea), $1, 'go', now() + interval '1 hour')`, j[:], j[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO venturi_journal (job_id, seq, entry) VALUES ($1, 1, '{}')`, j[:]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE venturi_job SET journal_moved = 1`); err != nil {
		t.Fatal(err)
	}
	res, err := q.DeleteJobs(ctx, venturi.JobFilter{}, venturi.BulkOptions{Reason: "cleanup"})
	if err != nil || res.Matched != 3 || res.Eligible != 2 || res.Changed != 2 {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	for _, table := range []string{"venturi_job", "venturi_signal", "venturi_step", "venturi_hook", "venturi_journal"} {
		col := "job_id"
		if table == "venturi_job" {
			col = "id"
		}
		if n := countRows(t, pool, table); n != 1 {
			t.Errorf("%s: %d rows left, want the running job's", table, n)
		}
		if n := countRows(t, pool, table+" WHERE "+col+" = '"+uuidString(id[2])+"'"); n != 1 {
			t.Errorf("%s: the running job's row is gone", table)
		}
	}
	if _, err := q.Job(ctx, id[0]); !errors.Is(err, venturi.ErrNotFound) {
		t.Fatalf("deleted job: %v", err)
	}
}

// TestAuditIsWrittenInTheActionsTransaction: an action whose transaction fails at commit
// leaves neither its change nor its audit entry, for a bulk action's batch and for a queue
// setting alike (a deferred trigger refuses the commit).
func TestAuditIsWrittenInTheActionsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	seedDead(t, pool, 3, venturi.DefaultQueue)
	if _, err := pool.Exec(ctx, `
		CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
		CREATE CONSTRAINT TRIGGER refuse_retry AFTER UPDATE ON venturi_job DEFERRABLE INITIALLY DEFERRED
		    FOR EACH ROW WHEN (NEW.state = 'available') EXECUTE FUNCTION refuse();
		CREATE CONSTRAINT TRIGGER refuse_pause AFTER INSERT OR UPDATE ON venturi_queue DEFERRABLE INITIALLY DEFERRED
		    FOR EACH ROW WHEN (NEW.name = 'boom') EXECUTE FUNCTION refuse();`); err != nil {
		t.Fatal(err)
	}
	if _, err := q.RetryJobs(ctx, mustFilter(t, "state:dead"), venturi.BulkOptions{}); err == nil || !strings.Contains(err.Error(), "refused at commit") {
		t.Fatalf("retry: %v", err)
	}
	if err := q.PauseQueue(ctx, "boom"); err == nil {
		t.Fatal("pause committed")
	}
	if n := countJobs(t, pool, "state = 'dead'"); n != 3 || len(auditEntries(t, q)) != 0 {
		t.Fatalf("after the refused commits: %d dead, audit %+v", n, auditEntries(t, q))
	}
	if err := q.PauseQueue(venturi.WithActor(ctx, "carol"), "calm"); err != nil {
		t.Fatal(err)
	}
	if log := auditEntries(t, q); len(log) != 1 || log[0].Action != venturi.AuditQueuePause || log[0].Target != "calm" || log[0].Actor != "carol" {
		t.Fatalf("audit: %+v", log)
	}
}

// TestAuditRecordsOperatorActions: every operator method records ctx's actor, the action
// and its target; AuditLog pages newest first.
func TestAuditRecordsOperatorActions(t *testing.T) {
	t.Parallel()
	pool, q := newQueue(t)
	ctx := venturi.WithActor(context.Background(), "  dave  ")
	for _, step := range []func() error{
		func() error { return q.PauseQueue(ctx, "media") },
		func() error { return q.ResumeQueue(ctx, "media") },
		func() error { return q.SetQueueConcurrency(ctx, "media", 4) },
		func() error {
			_, err := q.Schedule(ctx, venturi.Schedule{Name: "nightly", Cron: "0 3 * * *", Task: opsTask{}})
			return err
		},
		func() error { return q.PauseSchedule(ctx, "nightly") },
		func() error { return q.ResumeSchedule(ctx, "nightly") },
		func() error { _, err := q.RemoveSchedule(ctx, "nightly"); return err },
		func() error {
			_, err := pool.Exec(ctx, `
				INSERT INTO venturi_kind (kind, brk_failures, brk_by_part) VALUES ('fetch', 3, true);
				INSERT INTO venturi_gate (key, kind, part, fails, open_until) VALUES ('b' || chr(31) || 'fetch' || chr(31) || 'h1', 'fetch', 'h1', 3, now() + interval '1 hour')`)
			return err
		},
		func() error { return q.ResetCircuit(ctx, "fetch", "h1") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.ResetCircuit(ctx, "fetch", "h2"); !errors.Is(err, venturi.ErrNoCircuit) {
		t.Fatalf("reset of a breaker without a row: %v", err)
	}
	cs, err := q.Circuits(ctx)
	if err != nil || len(cs) != 1 || cs[0].State != venturi.CircuitClosed || cs[0].Failures != 0 {
		t.Fatalf("circuits after the reset: %+v, %v", cs, err)
	}
	var got []string
	for _, e := range auditEntries(t, q) {
		if e.Actor != "dave" || e.At.IsZero() {
			t.Fatalf("entry %+v", e)
		}
		got = append(got, e.Action+" "+e.Target+" "+e.Reason)
	}
	want := []string{"circuit.reset fetch/h1 ", "cron.remove nightly ", "cron.resume nightly ", "cron.pause nightly ",
		"queue.concurrency media concurrency 4", "queue.resume media ", "queue.pause media "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("audit log:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRetryJobsFindsAJobThatMovedMeanwhile: a dead job is listed by a bulk retry while the
// retention duty's sweep moves it into the history (here a transaction that moves it the
// same way, holding its row until the retry's statement waits for it). The retry's first
// statement finds it in neither table (the row it waited for is gone; the history row is
// newer than its snapshot); the retry runs once more for the jobs it did not change, and
// retries it. Before, the job was counted eligible and left dead.
func TestRetryJobsFindsAJobThatMovedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	seedDead(t, pool, 1, venturi.DefaultQueue)
	if _, err := pool.Exec(ctx, `SELECT venturi_history_extend('1 hour', now() + interval '3 hours', 1000)`); err != nil {
		t.Fatal(err)
	}
	mover, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mover.Rollback(ctx) }()
	if _, err := mover.Exec(ctx, `WITH gone AS (DELETE FROM venturi_job RETURNING *)
		INSERT INTO venturi_job_history (id, kind, state, priority, payload, run_at, runs, failures, max_failures,
			attempted_at, journal, created_at, finished_at, journal_moved, queue, events, prune_at)
		SELECT id, kind, state, priority, payload, run_at, runs, failures, max_failures, attempted_at, journal,
			created_at, finished_at, journal_moved, queue, events, now() + interval '1 hour' FROM gone`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res venturi.BulkResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := q.RetryJobs(ctx, mustFilter(t, "state:dead"), venturi.BulkOptions{})
		done <- result{res, err}
	}()
	eventually(t, within, "the retry to wait for the moving row", func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%name: RetryJobs%' AND datname = current_database())`).Scan(&waiting)
		return err == nil && waiting
	})
	if err := mover.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.res.Eligible != 1 || r.res.Changed != 1 {
		t.Fatalf("retry: %+v, %v; want the job retried", r.res, r.err)
	}
	if n := countJobs(t, pool, "state = 'available'"); n != 1 {
		t.Fatalf("%d jobs available after the retry, want 1", n)
	}
}
