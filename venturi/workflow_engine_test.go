package venturi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/workflowmodel"
)

// The engine in the database (venturi_workflow_settle and the inbox triggers) against
// the reference model (internal/workflowmodel), on random graphs and random histories:
// after every change and its settle, every node's state, outcomes and counters, and the
// workflow's state, are the model's. Changes are made as the queue makes them: a finish
// that moves the job to the history, an end in place later swept there, a cancel or a
// delete of a blocked job, a retry from either table, a spawn, a seal, a cancel of the
// workflow; some are settled in their own transaction, others later by a resolver pass.
func TestWorkflowEngineMatchesModel(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	for lane := 1; lane <= 2; lane++ {
		if _, err := pool.Exec(ctx, `SELECT venturi_history_extend($1::smallint, interval '1 hour', now() + interval '3 hours', 1000)`, lane); err != nil {
			t.Fatal(err)
		}
	}
	cases := 300
	if testing.Short() {
		cases = 60
	}
	// VENTURI_ENGINE_CASES widens a local search (seeds 0 to n-1), VENTURI_ENGINE_FROM
	// starts it at a seed (a failure's, to replay it), and VENTURI_ENGINE_DUMP logs every
	// node as the model and the database have it when a case fails.
	if n, err := strconv.Atoi(os.Getenv("VENTURI_ENGINE_CASES")); err == nil {
		cases = n
	}
	from, _ := strconv.Atoi(os.Getenv("VENTURI_ENGINE_FROM"))
	for seed := uint64(from); seed < uint64(cases); seed++ {
		e := newEngineCase(t, pool, seed)
		e.run(ctx)
	}
}

type engineCase struct {
	t     *testing.T
	pool  *pgxpool.Pool
	seed  uint64
	r     *rand.Rand
	m     *workflowmodel.Flow
	id    ulid.ULID
	jobs  map[string]ulid.ULID
	steps []string
}

func newEngineCase(t *testing.T, pool *pgxpool.Pool, seed uint64) *engineCase {
	return &engineCase{t: t, pool: pool, seed: seed, r: rand.New(rand.NewPCG(seed, 11)), id: ulid.Make(), jobs: map[string]ulid.ULID{}}
}

func (e *engineCase) fatalf(format string, args ...any) {
	e.t.Helper()
	if os.Getenv("VENTURI_ENGINE_DUMP") != "" { // every node, in the model and in the database
		for _, n := range e.m.Names() {
			nd := e.m.Node(n)
			var st, own, js string
			var rel bool
			_ = e.pool.QueryRow(context.Background(), `SELECT COALESCE(n.own,''), n.released, COALESCE((SELECT j.state::text FROM venturi_job_all j WHERE j.id = n.job_id),'-'), COALESCE(n.contrib::text,'')
				FROM venturi_workflow_node n WHERE n.workflow_id = $1 AND n.node = $2`, e.id, n).Scan(&own, &rel, &js, &st)
			e.t.Logf("%-12s deps=%v parent=%q policy=%v | model %v own=%v | engine own=%s released=%v job=%s contrib=%s", n, nd.Deps, nd.Parent, nd.Policy, nd.State, nd.Own, own, rel, js, st)
		}
	}
	e.t.Fatalf("seed %d after %v: %s", e.seed, e.steps, fmt.Sprintf(format, args...))
}

func (e *engineCase) do(ctx context.Context, sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(ctx, sql, args...); err != nil {
		e.fatalf("%s: %v", sql, err)
	}
}

// addNode adds a node to the model and the database (a job blocked, or a group).
func (e *engineCase) addNode(ctx context.Context, tx pgx.Tx, name string, group, sealed bool, policy workflowmodel.Policy, deps []string, parent string) {
	e.t.Helper()
	var err error
	if group {
		err = e.m.AddGroup(name, sealed, parent)
	} else {
		err = e.m.AddJob(name, policy, deps, parent)
	}
	if err != nil {
		e.fatalf("model add %s: %v", name, err)
	}
	var job any
	if !group {
		id := ulid.Make()
		e.jobs[name] = id
		job = id
		if _, err := tx.Exec(ctx, `INSERT INTO venturi_job (id, kind, state, payload, run_at, workflow_id)
			VALUES ($1, 'wf', 'blocked', '{}', now(), $2)`, id, e.id); err != nil {
			e.fatalf("insert job: %v", err)
		}
	}
	var par any
	if parent != "" {
		par = parent
	}
	if deps == nil {
		deps = []string{}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO venturi_workflow_node (workflow_id, node, job_id, policy, deps, parent, sealed)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, e.id, name, job, int16(policy), deps, par, !group || sealed); err != nil {
		e.fatalf("insert node: %v", err)
	}
}

func (e *engineCase) run(ctx context.Context) {
	e.t.Helper()
	r := e.r
	e.m = workflowmodel.New(r.IntN(8) == 0)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO venturi_workflow (id, fail_fast) VALUES ($1, $2)`, e.id, e.m.FailFast); err != nil {
		e.t.Fatal(err)
	}
	n := 2 + r.IntN(20)
	var names []string
	for i := range n {
		name := fmt.Sprint("n", i)
		if len(names) > 0 && r.IntN(8) == 0 {
			e.addNode(ctx, tx, name, true, r.IntN(2) == 0, 0, nil, "")
			names = append(names, name)
			continue
		}
		var deps []string
		for _, d := range names {
			if r.IntN(len(names)+1) < 2 {
				deps = append(deps, d)
			}
		}
		p := workflowmodel.Needs
		if len(deps) > 0 {
			p = workflowmodel.Policy(r.IntN(3))
		}
		parent := ""
		for _, g := range names {
			if gn := e.m.Node(g); gn.Group && r.IntN(3) == 0 && !e.m.WaitsOn(deps, g) {
				parent = g
				break
			}
		}
		e.addNode(ctx, tx, name, false, false, p, deps, parent)
		names = append(names, name)
	}
	if _, err := tx.Exec(ctx, `SELECT venturi_workflow_settle(ARRAY[$1::uuid], '')`, e.id); err != nil {
		e.fatalf("settle: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.m.Settle()
	e.compare(ctx)

	for step := 0; step < 400; step++ {
		released, ended, blocked := e.byState()
		if len(released) == 0 && e.sealAll(ctx) {
			continue
		}
		if len(released) == 0 && (len(ended) == 0 || r.IntN(3) > 0) {
			if !e.m.Finished() {
				e.fatalf("model stuck")
			}
			return
		}
		e.change(ctx, released, ended, blocked)
		// Settle in the change's transaction (done there), or by a resolver pass now.
		e.do(ctx, `SELECT venturi_workflow_resolve('', 64)`)
		e.m.Settle()
		e.compare(ctx)
	}
}

func (e *engineCase) byState() (released, ended, blocked []string) {
	for _, n := range e.m.Names() {
		nd := e.m.Node(n)
		switch {
		case nd.Group:
		case nd.State == workflowmodel.Released:
			released = append(released, n)
		case (nd.State == workflowmodel.Ended && nd.Own != workflowmodel.Del) || nd.State == workflowmodel.Decided:
			ended = append(ended, n)
		case nd.State == workflowmodel.Blocked:
			blocked = append(blocked, n)
		}
	}
	return released, ended, blocked
}

// sealAll seals the open groups; false when there were none (or the workflow finished:
// then nothing can be sealed).
func (e *engineCase) sealAll(ctx context.Context) bool {
	if e.m.Finished() {
		return false
	}
	any := false
	for _, n := range e.m.Names() {
		if nd := e.m.Node(n); nd.Group && nd.State != workflowmodel.Sealed {
			e.steps = append(e.steps, "seal "+n)
			if err := e.m.Seal(n); err != nil {
				e.fatalf("%v", err)
			}
			e.do(ctx, `SELECT venturi_workflow_seal($1, $2, '')`, e.id, n)
			any = true
		}
	}
	if any {
		e.m.Settle()
		e.compare(ctx)
	}
	return any
}

var endStates = map[workflowmodel.Outcome]string{workflowmodel.OK: "completed", workflowmodel.Fail: "dead", workflowmodel.Cancel: "cancelled"}

// change makes one random change, in the model and in the database.
func (e *engineCase) change(ctx context.Context, released, ended, blocked []string) {
	r := e.r
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	x := r.IntN(100)
	switch {
	case x < 3 && !e.m.CancelRequested():
		e.steps = append(e.steps, "cancel")
		e.m.Cancel()
		e.do(ctx, `SELECT venturi_workflow_cancel($1, 'test', '')`, e.id)
	case x < 10 && len(blocked) > 0:
		n := pick(blocked)
		if r.IntN(2) == 0 {
			e.steps = append(e.steps, "cancel-blocked "+n)
			e.must(e.m.End(n, workflowmodel.Cancel))
			e.do(ctx, `UPDATE venturi_job SET state = 'cancelled', finished_at = now() WHERE id = $1`, e.jobs[n])
		} else {
			e.steps = append(e.steps, "delete-blocked "+n)
			e.must(e.m.End(n, workflowmodel.Del))
			e.do(ctx, `DELETE FROM venturi_job WHERE id = $1`, e.jobs[n])
		}
	case x < 14 && len(ended) > 1:
		// Several retried before one settle, as RetryWorkflow retries a workflow's failed
		// and cancelled members (or RetryJobs some, inside a cancelled workflow too): what a
		// retried node needs may reopen in the same settle.
		var some []string
		for _, n := range ended {
			if r.IntN(2) == 0 {
				some = append(some, n)
			}
		}
		e.steps = append(e.steps, fmt.Sprint("retry ", some))
		for _, n := range some {
			e.must(e.m.Reopen(n))
			e.retry(ctx, e.jobs[n])
		}
	case x < 17 && e.failedOrCancelled() > 0:
		// RetryWorkflow: the cancel (a fail-fast's too) lifted, every job whose run failed
		// or was cancelled back, and what a cancel decided decided again, in one settle.
		e.steps = append(e.steps, "retry-workflow")
		e.m.Retry()
		for _, n := range e.m.Names() {
			if nd := e.m.Node(n); !nd.Group && nd.State == workflowmodel.Ended && (nd.Own == workflowmodel.Fail || nd.Own == workflowmodel.Cancel) {
				e.must(e.m.Reopen(n))
			}
		}
		if _, err := venturi.NewQueue(e.pool, venturi.QueueConfig{}).RetryWorkflow(ctx, e.id, "test"); err != nil {
			e.fatalf("RetryWorkflow: %v", err)
		}
	case x < 20 && len(ended) > 0:
		n := pick(ended)
		e.steps = append(e.steps, "retry "+n)
		e.must(e.m.Reopen(n))
		e.retry(ctx, e.jobs[n])
	case x < 30 && len(released) > 0:
		n := pick(released)
		child := fmt.Sprintf("%s.s%d", n, len(e.steps))
		var deps []string
		if names := e.m.Names(); r.IntN(2) == 0 {
			if d := pick(names); !e.m.WaitsOn([]string{d}, n) {
				deps = []string{d}
			}
		}
		p := workflowmodel.Needs
		if len(deps) > 0 {
			p = workflowmodel.Policy(r.IntN(3))
		}
		e.steps = append(e.steps, fmt.Sprintf("spawn %s <- %v by %s", child, deps, n))
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		e.addNode(ctx, tx, child, false, false, p, deps, n)
		if _, err := tx.Exec(ctx, `SELECT venturi_workflow_settle(ARRAY[$1::uuid], '')`, e.id); err != nil {
			e.fatalf("settle: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			e.t.Fatal(err)
		}
	case x < 35:
		e.steps = append(e.steps, "sweep")
		e.sweep(ctx)
	case x < 40 && len(released) > 0:
		// A run's completion that spawns: its children are written in its finish's
		// transaction, which settles as it commits (a worker's finish).
		n := pick(released)
		k := 1 + r.IntN(3)
		e.steps = append(e.steps, fmt.Sprintf("spawn %d and complete %s", k, n))
		e.finishWith(ctx, e.jobs[n], "completed", finishAtCommit, func(tx pgx.Tx) {
			for i := range k {
				e.addNode(ctx, tx, fmt.Sprintf("%s.c%d.%d", n, len(e.steps), i), false, false, workflowmodel.Needs, nil, n)
			}
		})
		e.must(e.m.End(n, workflowmodel.OK))
	case len(released) > 0:
		n := pick(released)
		o := []workflowmodel.Outcome{workflowmodel.OK, workflowmodel.OK, workflowmodel.OK, workflowmodel.Fail, workflowmodel.Cancel}[r.IntN(5)]
		e.must(e.m.End(n, o))
		if r.IntN(2) == 0 {
			mode := finishMode(r.IntN(3))
			e.steps = append(e.steps, fmt.Sprintf("finish %s %v (%d)", n, o, mode))
			e.finish(ctx, e.jobs[n], endStates[o], mode)
		} else {
			e.steps = append(e.steps, fmt.Sprintf("end-in-place %s %v", n, o))
			e.do(ctx, `UPDATE venturi_job SET state = $2::venturi_job_state, finished_at = now() WHERE id = $1`, e.jobs[n], endStates[o])
		}
	}
}

// failedOrCancelled counts the job nodes whose run failed or was cancelled.
func (e *engineCase) failedOrCancelled() int {
	k := 0
	for _, n := range e.m.Names() {
		if nd := e.m.Node(n); !nd.Group && nd.State == workflowmodel.Ended && (nd.Own == workflowmodel.Fail || nd.Own == workflowmodel.Cancel) {
			k++
		}
	}
	return k
}

func (e *engineCase) must(err error) {
	e.t.Helper()
	if err != nil {
		e.fatalf("model: %v", err)
	}
}

// historyCols are the columns a move copies.
const historyCols = `id, kind, state, priority, dedup_key, payload, carry, run_at, runs, failures, max_failures,
	worker_id, attempted_at, journal, created_at, journal_moved, journal_dropped, queue, part, slot_key, slot_limit,
	slot_policy, breaker, stop_requested_at, stop_event, stop_note, events, meta, workflow_id`

// finishMode is who settles a finish: a resolver afterwards, the finish's transaction
// itself (SET LOCAL venturi.workflow_settle), or the deferred trigger as it commits (SET
// LOCAL venturi.finish_channel, as a worker's finish does).
type finishMode int

const (
	finishResolver finishMode = iota
	finishSettles
	finishAtCommit
)

// finish ends a job as a run's finish does: claimed, it leaves venturi_job for the
// history in its end state, settled as mode says.
func (e *engineCase) finish(ctx context.Context, job ulid.ULID, state string, mode finishMode) {
	e.finishWith(ctx, job, state, mode, nil)
}

// finishWith is finish, with also (not nil) run in the transaction after the end.
func (e *engineCase) finishWith(ctx context.Context, job ulid.ULID, state string, mode finishMode, also func(pgx.Tx)) {
	e.t.Helper()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	switch mode {
	case finishSettles:
		if _, err := tx.Exec(ctx, `SELECT set_config('venturi.workflow_settle', 'on', true)`); err != nil {
			e.t.Fatal(err)
		}
	case finishAtCommit:
		if err := dbsqlc.New().SetLocalFinishChannel(ctx, tx, ""); err != nil {
			e.t.Fatal(err)
		}
	}
	// Claimed first: the finish deletes the running row.
	if _, err := tx.Exec(ctx, `UPDATE venturi_job SET state = 'running', lease_token = 1,
		lease_expires_at = now() + interval '1 hour', attempted_at = now(), runs = runs + 1 WHERE id = $1`, job); err != nil {
		e.fatalf("claim: %v", err)
	}
	if _, err := tx.Exec(ctx, `WITH d AS (DELETE FROM venturi_job WHERE id = $1 RETURNING *)
		INSERT INTO venturi_job_history (`+historyCols+`, finished_at, prune_at)
		SELECT id, kind, $2::venturi_job_state, priority, dedup_key, payload, carry, run_at, runs, failures, max_failures,
		       worker_id, attempted_at, journal, created_at, journal_moved, journal_dropped, queue, part, slot_key, slot_limit,
		       slot_policy, breaker, stop_requested_at, stop_event, stop_note, events, meta, workflow_id, now(), now() + interval '1 hour'
		FROM d`, job, state); err != nil {
		e.fatalf("finish: %v", err)
	}
	if also != nil {
		also(tx)
	}
	if mode == finishSettles {
		if _, err := tx.Exec(ctx, `SELECT venturi_workflow_settle(ARRAY[$1::uuid], '')`, e.id); err != nil {
			e.fatalf("settle: %v", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		e.fatalf("commit: %v", err)
	}
}

// sweep moves the jobs that ended in venturi_job to the history, as the retention duty's
// sweep does.
func (e *engineCase) sweep(ctx context.Context) {
	e.do(ctx, `WITH d AS (DELETE FROM venturi_job WHERE workflow_id = $1 AND state IN ('completed', 'dead', 'cancelled') RETURNING *)
		INSERT INTO venturi_job_history (`+historyCols+`, finished_at, prune_at)
		SELECT `+historyCols+`, COALESCE(finished_at, now()), now() + interval '1 hour' FROM d`, e.id)
}

// retry brings an ended job back blocked, as a bulk retry of a workflow's member does:
// in place, or back from the history.
func (e *engineCase) retry(ctx context.Context, job ulid.ULID) {
	e.do(ctx, `UPDATE venturi_job SET state = 'blocked', finished_at = NULL,
		journal = journal || '[{"event":"retried"}]' WHERE id = $1 AND state IN ('completed', 'dead', 'cancelled')`, job)
	e.do(ctx, `WITH b AS (DELETE FROM venturi_job_history WHERE id = $1 RETURNING *)
		INSERT INTO venturi_job (id, kind, state, payload, run_at, journal, workflow_id)
		SELECT id, kind, 'blocked', payload, now(), journal || '[{"event":"retried"}]', workflow_id FROM b`, job)
}

// compare fails when a node or the workflow differs from the model.
func (e *engineCase) compare(ctx context.Context) {
	e.t.Helper()
	rows, err := e.pool.Query(ctx, `SELECT n.node, n.job_id IS NULL, n.sealed, n.released, COALESCE(n.run, ''), COALESCE(n.own, ''),
		COALESCE(n.outcome, ''), n.n_deps, n.waiting, n.n_fail, n.n_cancel, n.n_skip, n.holds, n.h_fail, n.h_cancel,
		COALESCE((SELECT j.state::text FROM venturi_job_all j WHERE j.id = n.job_id), '')
		FROM venturi_workflow_node n WHERE n.workflow_id = $1`, e.id)
	if err != nil {
		e.t.Fatal(err)
	}
	type nodeRow struct {
		name, run, own, outcome, jobState string
		group, sealed, released           bool
		c                                 [8]int
	}
	var got []nodeRow
	for rows.Next() {
		var r nodeRow
		c := &r.c
		if err := rows.Scan(&r.name, &r.group, &r.sealed, &r.released, &r.run, &r.own, &r.outcome, &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &r.jobState); err != nil {
			rows.Close()
			e.t.Fatal(err)
		}
		got = append(got, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	seen := 0
	for _, r := range got {
		name, own, group := r.name, r.own, r.group
		seen++
		m := e.m.Node(name)
		if m == nil {
			e.fatalf("node %s not in the model", name)
		}
		var state workflowmodel.State
		switch {
		case group && r.sealed:
			state = workflowmodel.Sealed
		case group && own != "":
			state = workflowmodel.Decided
		case group:
			state = workflowmodel.Blocked
		case r.run != "":
			state = workflowmodel.Ended
		case r.released:
			state = workflowmodel.Released
		case own != "":
			state = workflowmodel.Decided
		default:
			state = workflowmodel.Blocked
		}
		str := func(o workflowmodel.Outcome) string { return o.String() }
		have := fmt.Sprintf("%v own=%s outcome=%s counters=%v", state, own, r.outcome, r.c)
		want := fmt.Sprintf("%v own=%s outcome=%s counters=%v", m.State, str(m.Own), str(m.Outcome),
			[8]int{m.NDeps, m.Waiting, m.NFail, m.NCancel, m.NSkip, m.Holds, m.HFail, m.HCancel})
		if have != want {
			e.fatalf("node %s:\n got %s\nwant %s", name, have, want)
		}
		// The job's state follows the node's.
		if !group {
			var ok bool
			switch m.State {
			case workflowmodel.Blocked:
				ok = r.jobState == "blocked"
			case workflowmodel.Released:
				ok = r.jobState == "available" || r.jobState == "scheduled"
			case workflowmodel.Decided:
				ok = r.jobState == "cancelled"
			case workflowmodel.Ended:
				ok = r.jobState == endStates[m.Own] || (m.Own == workflowmodel.Del && r.jobState == "")
			}
			if !ok {
				e.fatalf("node %s is %v, its job %q", name, m.State, r.jobState)
			}
		}
	}
	if seen != len(e.m.Names()) {
		e.fatalf("%d nodes in the database, %d in the model", seen, len(e.m.Names()))
	}
	var state string
	var open, inbox int
	if err := e.pool.QueryRow(ctx, `SELECT state, open_nodes, (SELECT count(*) FROM venturi_workflow_inbox i WHERE i.workflow_id = w.id)
		FROM venturi_workflow w WHERE id = $1`, e.id).Scan(&state, &open, &inbox); err != nil {
		e.t.Fatal(err)
	}
	if want := e.m.Result().String(); state != want {
		e.fatalf("workflow %s, want %s", state, want)
	}
	if inbox != 0 {
		e.fatalf("%d inbox rows left after a settle", inbox)
	}
	wantOpen := 0
	for _, n := range e.m.Names() {
		if e.m.Node(n).Outcome == workflowmodel.None {
			wantOpen++
		}
	}
	if open != wantOpen {
		e.fatalf("open_nodes %d, want %d", open, wantOpen)
	}
}
