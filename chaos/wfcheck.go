package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// Workflows and batches, checked from the database alone (README.md, "Workflows, batches
// and chunks"): the workflows' and nodes' rows as they stand at quiescence (or as
// retention pruned them, in the retention schema's archive), the outputs, the members'
// journals (when their jobs were not pruned), and what the members and the driver
// recorded: the outputs each run read, the nodes each spawner spawned, the counts each
// callback saw, the operations the driver did and when they returned.

const (
	invWfEarly     = "I1 workflows: no early start; final upstream outputs read"
	invWfRelease   = "I2 workflows: one release per arming, one callback run"
	invWfStuck     = "I3 workflows: nothing stuck at quiescence"
	invWfCounters  = "I4 workflows: counters and open_nodes equal a recount"
	invWfPropagate = "I5 workflows: ran iff its policy held; ends as scripted"
	invWfCancel    = "I6 workflows: no member starts after CancelWorkflow"
	invWfSpawn     = "I7 workflows: spawned nodes attached to their spawner"
	invWfRetain    = "I8 workflows: I1-I7 hold with members pruned mid-flow"
	invDeadlock    = "I10 no deadlock (pg_stat_database.deadlocks delta 0)"
)

// wfRow is a venturi_workflow row (or its archive's).
type wfRow struct {
	id        [16]byte
	batch     bool
	state     string
	failFast  bool
	ffTripped bool
	openNodes int
	nodes     int
	cancelReq *time.Time
	archived  bool // pruned by retention; the archive kept it
}

// nodeRow is a venturi_workflow_node row (or its archive's). Empty strings are NULLs.
type nodeRow struct {
	wf                             [16]byte
	name                           string
	job                            *[16]byte // nil: a group
	policy                         int
	deps                           []string
	parent                         string
	nDeps, waiting, nFail, nCancel int
	nSkip, holds, hFail, hCancel   int
	sealed, released               bool
	run, own, outcome, contrib     string
	createdAt                      time.Time
	endedAt                        *time.Time
	archived                       bool
}

// outputRow is a venturi_workflow_output row: the token it was written under, and the
// token the output itself holds (wfOutput).
type outputRow struct {
	token, held int64
}

// wfScriptRow is a chaos_wf row: what the driver scripted for a workflow or batch.
type wfScriptRow struct {
	batch    bool
	plan     string
	open     bool
	failFast bool
}

// memberRow is a chaos_wf_member row: a member the driver enqueued, or (from chaos_spawn)
// one a member spawned or added.
type memberRow struct {
	wf     [16]byte
	node   string
	script string
	root   bool
	spawns int
}

// readRow is a chaos_wf_read row.
type readRow struct {
	run    int
	token  int64
	node   string
	outTok int64
	pruned bool
	at     time.Time
}

// spawnRow is a chaos_spawn row.
type spawnRow struct {
	job    [16]byte
	run    int
	token  int64
	kind   string // spawn, add
	node   string
	child  [16]byte
	script string
}

// cbRow is a chaos_cb row.
type cbRow struct {
	run                                          int
	token                                        int64
	which                                        string
	total, succeeded, failed, cancelled, pending int
}

// opRow is a chaos_wf_op row.
type opRow struct {
	op       string
	at, done time.Time
	err      string
	n        int
}

// wfEvidence is what the workflow checks read from one schema.
type wfEvidence struct {
	retain  bool // the retention schema: jobs may have been pruned
	wfs     map[[16]byte]*wfRow
	nodes   map[[16]byte]map[string]*nodeRow
	outputs map[[16]byte]map[string]outputRow
	scripts map[[16]byte]wfScriptRow
	members map[[16]byte]memberRow // by job
	reads   map[[16]byte][]readRow // by reading job
	spawns  []spawnRow
	cbs     map[[16]byte][]cbRow // by callback job
	ops     map[[16]byte][]opRow // by workflow
	inbox   int                  // unsettled inbox rows
	blocked int                  // blocked jobs
	jobs    map[[16]byte]*jobRow // present jobs (a pruned one is absent)
	starts  map[[16]byte][]startRow
	effects map[[16]byte][]effectRow
	lossy   *faultRow
}

// wfStats is what the report shows of the workflows of one schema.
type wfStats struct {
	workflows, batches int
	byState            map[string]int
	archived           int
	nodes, jobNodes    int
	ran                int
	decided            map[string]int
	spawned, added     int
	releases, revived  int
	retriedEntries     int
	cancels            int // workflows whose cancel returned
	retries            int // workflows retried
	reads, readsPruned int
	cbRan              map[string]int
	members, pruned    int // member jobs; those retention pruned
	startsAfterCancel  int // handler starts after CancelWorkflow returned, of runs claimed before it
}

func (s wfStats) String() string {
	var st []string
	for _, k := range []string{"succeeded", "failed", "cancelled", "open"} {
		if s.byState[k] > 0 {
			st = append(st, fmt.Sprintf("%s %d", k, s.byState[k]))
		}
	}
	var dec []string
	for _, k := range []string{"dfail", "dcancel", "skip", "cancel"} {
		dec = append(dec, fmt.Sprintf("%s %d", k, s.decided[k]))
	}
	return fmt.Sprintf("%d workflows and %d batches (%s), %d nodes (%d jobs: %d ran to their end, decided without a run: %s); "+
		"%d spawned, %d added by members; %d releases, %d revived, %d retried; cancels returned %d, retries %d; "+
		"outputs read %d (of pruned jobs %d); callbacks completed: on_success %d, on_end %d, on_failure %d",
		s.workflows, s.batches, strings.Join(st, ", "), s.nodes, s.jobNodes, s.ran, strings.Join(dec, ", "),
		s.spawned, s.added, s.releases, s.revived, s.retriedEntries, s.cancels, s.retries, s.reads, s.readsPruned,
		s.cbRan[venturi.BatchOnSuccess], s.cbRan[venturi.BatchOnEnd], s.cbRan[venturi.BatchOnFailure])
}

// loadWfEvidence reads a schema's workflow evidence. jobs, starts and effects are the
// run's (the main schema's checker read them already); nil reads them here (the
// retention schema).
func loadWfEvidence(ctx context.Context, pool *pgxpool.Pool, retain bool, d *runRecords) (*wfEvidence, error) {
	ev := &wfEvidence{retain: retain, wfs: map[[16]byte]*wfRow{}, nodes: map[[16]byte]map[string]*nodeRow{},
		outputs: map[[16]byte]map[string]outputRow{}, scripts: map[[16]byte]wfScriptRow{}, members: map[[16]byte]memberRow{},
		reads: map[[16]byte][]readRow{}, cbs: map[[16]byte][]cbRow{}, ops: map[[16]byte][]opRow{}}
	var archive bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('chaos_wf_archive') IS NOT NULL`).Scan(&archive); err != nil {
		return nil, err
	}
	union := func(live, arch, cols string) string {
		q := `SELECT ` + cols + `, false FROM ` + live
		if archive {
			q += ` UNION ALL SELECT ` + cols + `, true FROM ` + arch
		}
		return q
	}
	rows, err := pool.Query(ctx, union("venturi_workflow", "chaos_wf_archive",
		`id, kind = 1, state, fail_fast, fail_fast_tripped, open_nodes, nodes, cancel_requested_at`))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		w := &wfRow{}
		if err := rows.Scan(&id, &w.batch, &w.state, &w.failFast, &w.ffTripped, &w.openNodes, &w.nodes, &w.cancelReq, &w.archived); err != nil {
			return nil, err
		}
		w.id = id.Bytes
		ev.wfs[w.id] = w
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, union("venturi_workflow_node", "chaos_wf_node_archive",
		`workflow_id, node, job_id, policy, deps, COALESCE(parent, ''), n_deps, waiting, n_fail, n_cancel, n_skip, holds, h_fail, h_cancel,
		 sealed, released, COALESCE(run, ''), COALESCE(own, ''), COALESCE(outcome, ''), COALESCE(contrib::text, ''), created_at, ended_at`))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var wf, job pgtype.UUID
		n := &nodeRow{}
		if err := rows.Scan(&wf, &n.name, &job, &n.policy, &n.deps, &n.parent, &n.nDeps, &n.waiting, &n.nFail, &n.nCancel, &n.nSkip,
			&n.holds, &n.hFail, &n.hCancel, &n.sealed, &n.released, &n.run, &n.own, &n.outcome, &n.contrib, &n.createdAt, &n.endedAt,
			&n.archived); err != nil {
			return nil, err
		}
		n.wf = wf.Bytes
		if job.Valid {
			b := job.Bytes
			n.job = &b
		}
		if ev.nodes[n.wf] == nil {
			ev.nodes[n.wf] = map[string]*nodeRow{}
		}
		ev.nodes[n.wf][n.name] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, union("venturi_workflow_output", "chaos_wf_output_archive", `workflow_id, node, token, output`))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var wf pgtype.UUID
		var node string
		var o outputRow
		var raw []byte
		var archived bool
		if err := rows.Scan(&wf, &node, &o.token, &raw, &archived); err != nil {
			return nil, err
		}
		var held wfOutput
		if json.Unmarshal(raw, &held) == nil {
			o.held = held.Token
		}
		if ev.outputs[wf.Bytes] == nil {
			ev.outputs[wf.Bytes] = map[string]outputRow{}
		}
		ev.outputs[wf.Bytes][node] = o
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM venturi_workflow_inbox), (SELECT count(*) FROM venturi_job WHERE state = 'blocked')`).
		Scan(&ev.inbox, &ev.blocked); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT wf_id, batch, plan, open, fail_fast FROM chaos_wf`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var s wfScriptRow
		if err := rows.Scan(&id, &s.batch, &s.plan, &s.open, &s.failFast); err != nil {
			return nil, err
		}
		ev.scripts[id.Bytes] = s
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT job_id, wf_id, node, script, root, spawns FROM chaos_wf_member`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, wf pgtype.UUID
		var m memberRow
		if err := rows.Scan(&id, &wf, &m.node, &m.script, &m.root, &m.spawns); err != nil {
			return nil, err
		}
		m.wf = wf.Bytes
		ev.members[id.Bytes] = m
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT job_id, run, token, node, out_token, pruned, at FROM chaos_wf_read`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var x readRow
		if err := rows.Scan(&id, &x.run, &x.token, &x.node, &x.outTok, &x.pruned, &x.at); err != nil {
			return nil, err
		}
		ev.reads[id.Bytes] = append(ev.reads[id.Bytes], x)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT job_id, run, token, kind, node, child, script FROM chaos_spawn`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, child pgtype.UUID
		var x spawnRow
		if err := rows.Scan(&id, &x.run, &x.token, &x.kind, &x.node, &child, &x.script); err != nil {
			return nil, err
		}
		x.job, x.child = id.Bytes, child.Bytes
		ev.spawns = append(ev.spawns, x)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT job_id, run, token, which, total, succeeded, failed, cancelled, pending FROM chaos_cb`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var x cbRow
		if err := rows.Scan(&id, &x.run, &x.token, &x.which, &x.total, &x.succeeded, &x.failed, &x.cancelled, &x.pending); err != nil {
			return nil, err
		}
		ev.cbs[id.Bytes] = append(ev.cbs[id.Bytes], x)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT wf_id, op, at, COALESCE(done, at), err, n FROM chaos_wf_op ORDER BY at`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var x opRow
		if err := rows.Scan(&id, &x.op, &x.at, &x.done, &x.err, &x.n); err != nil {
			return nil, err
		}
		ev.ops[id.Bytes] = append(ev.ops[id.Bytes], x)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if d != nil {
		ev.jobs, ev.starts, ev.effects, ev.lossy = d.jobs, d.starts, d.effects, d.lossy
		return ev, nil
	}
	if ev.jobs, _, err = loadJobs(ctx, pool, `workflow_id IS NOT NULL`); err != nil {
		return nil, err
	}
	if ev.starts, err = loadStarts(ctx, pool); err != nil {
		return nil, err
	}
	if ev.effects, err = loadEffects(ctx, pool); err != nil {
		return nil, err
	}
	return ev, nil
}

// checkWorkflows checks the workflows of the run's schema (I1-I7) and of the retention
// schema (I8: the same checks, with members pruned).
func (r *report) checkWorkflows(ctx context.Context, pool *pgxpool.Pool, d *runRecords, cfg checkConfig) error {
	var has bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('venturi_workflow') IS NOT NULL AND to_regclass('chaos_wf') IS NOT NULL`).Scan(&has); err != nil {
		return err
	}
	if !has {
		return nil // a schema from before workflows (a rolling deploy that never migrated)
	}
	ev, err := loadWfEvidence(ctx, pool, false, d)
	if err != nil {
		return fmt.Errorf("workflows: %w", err)
	}
	st, bad := wfViolations(ev)
	r.wf = &st
	for _, inv := range []string{invWfEarly, invWfRelease, invWfStuck, invWfCounters, invWfPropagate, invWfCancel, invWfSpawn} {
		for _, v := range bad {
			if rest, ok := strings.CutPrefix(v, inv+": "); ok {
				r.fail(inv, "%s", rest)
			}
		}
	}
	if cfg.retain == nil {
		return nil
	}
	rev, err := loadWfEvidence(ctx, cfg.retain, true, nil)
	if err != nil {
		return fmt.Errorf("workflows of the retention schema: %w", err)
	}
	rst, rbad := wfViolations(rev)
	r.wfRetain = &rst
	var out []string
	for _, v := range rbad {
		inv, rest, _ := strings.Cut(v, ": ")
		out = append(out, invWfRetain+": "+strings.Fields(inv)[0]+" "+rest)
	}
	r.require(invWfRetain, out)
	return nil
}

// checkDeadlocks checks invDeadlock on the count the driver sampled.
func (r *report) checkDeadlocks(cfg checkConfig) {
	if cfg.deadlocks == nil {
		return
	}
	r.deadlocks = cfg.deadlocks
	var bad []string
	if *cfg.deadlocks != 0 {
		bad = append(bad, fmt.Sprintf("%d deadlocks detected by PostgreSQL during the run (the server log names the statements)", *cfg.deadlocks))
	}
	r.require(invDeadlock, prefixed(invDeadlock, bad))
}

// ---- the checks ----------------------------------------------------------------------------

// wfCheck is one pass of the workflow checks over a schema's evidence.
type wfCheck struct {
	ev        *wfEvidence
	st        wfStats
	bad       []string
	nodeOfJob map[[16]byte]*nodeRow
	scriptOf  map[[16]byte]string // every member's script, by job (callbacks: ok)
	known     map[[16]byte]bool   // jobs some record enqueued
	root      map[[16]byte]bool
	attached  map[[16]byte]map[string][]string
	rc        map[[16]byte]map[string]*recount
}

func (c *wfCheck) fail(inv, format string, a ...any) {
	c.bad = append(c.bad, inv+": "+fmt.Sprintf(format, a...))
}

// recount is a node's counters, contribution and outcome as recomputed from what it needs
// and what is attached to it.
type recount struct {
	nDeps, waiting, nFail, nCancel, nSkip int
	holds, hFail, hCancel                 int
	contrib, outcome                      string
	busy                                  bool
}

// wfClass is what an outcome counts as for what needs it (venturi_workflow_class).
func wfClass(o string) string {
	switch o {
	case "":
		return ""
	case "ok":
		return "s"
	case "fail", "dfail":
		return "f"
	case "skip":
		return "k"
	}
	return "c"
}

// wfOutcome is a node's propagated outcome (venturi_workflow_outcome).
func wfOutcome(own string, hFail, hCancel int) string {
	switch {
	case own == "fail" || own == "dfail":
		return own
	case hFail > 0:
		return "fail"
	case own != "ok":
		return own
	case hCancel > 0:
		return "cancel"
	}
	return "ok"
}

// wfContrib is what a node adds to the counters of what needs it (venturi_workflow_contrib):
// s f c k once it propagated, x while a failure of it is known, w while it waits.
func wfContrib(own string, holds, hFail, hCancel int) string {
	switch {
	case own != "" && holds == 0:
		return wfClass(wfOutcome(own, hFail, hCancel))
	case own == "fail" || own == "dfail" || hFail > 0:
		return "x"
	}
	return "w"
}

// wfDecide is a blocked node's decision by what it needs (venturi_workflow_decide without
// the cancel): release, "" (wait), dfail, dcancel or skip.
func wfDecide(policy int, x *recount) string {
	allSkipped := x.nDeps > 0 && x.nSkip == x.nDeps
	switch policy {
	case 0:
		switch {
		case x.nFail > 0:
			return "dfail"
		case x.nCancel > 0:
			return "dcancel"
		case x.waiting > 0:
			return ""
		case allSkipped:
			return "skip"
		}
		return "release"
	case 1:
		switch {
		case x.waiting > 0:
			return ""
		case allSkipped:
			return "skip"
		}
		return "release"
	}
	switch {
	case x.nFail > 0:
		return "release"
	case x.waiting > 0:
		return ""
	}
	return "skip"
}

func inWX(c string) bool { return c == "w" || c == "x" }
func inXF(c string) bool { return c == "x" || c == "f" }

// recountNode recomputes node name of workflow wf, after what it needs and what is attached
// to it.
func (c *wfCheck) recountNode(wf [16]byte, name string) *recount {
	memo := c.rc[wf]
	if x := memo[name]; x != nil {
		if x.busy {
			c.fail(invWfCounters, "workflow %s: node %s waits on itself", ulidStr(wf), name)
			return &recount{contrib: "w"}
		}
		return x
	}
	x := &recount{busy: true}
	memo[name] = x
	n := c.ev.nodes[wf][name]
	for _, a := range c.attached[wf][name] {
		y := c.recountNode(wf, a)
		x.holds += b2i(inWX(y.contrib))
		x.hFail += b2i(inXF(y.contrib))
		x.hCancel += b2i(y.contrib == "c")
	}
	for _, dn := range n.deps {
		if c.ev.nodes[wf][dn] == nil {
			c.fail(invWfCounters, "workflow %s: node %s needs %s, which does not exist", ulidStr(wf), name, dn)
			continue
		}
		y := c.recountNode(wf, dn)
		x.nDeps++
		x.waiting += b2i(inWX(y.contrib))
		x.nFail += b2i(inXF(y.contrib))
		x.nCancel += b2i(y.contrib == "c")
		x.nSkip += b2i(y.contrib == "k")
	}
	x.contrib = wfContrib(n.own, x.holds, x.hFail, x.hCancel)
	if !inWX(x.contrib) {
		x.outcome = wfOutcome(n.own, x.hFail, x.hCancel)
	}
	x.busy = false
	return x
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// wfViolations checks a schema's workflows and returns what the report shows of them and
// one line per violation, each "<invariant>: <what>".
func wfViolations(ev *wfEvidence) (wfStats, []string) {
	c := &wfCheck{ev: ev, nodeOfJob: map[[16]byte]*nodeRow{}, scriptOf: map[[16]byte]string{}, known: map[[16]byte]bool{},
		root: map[[16]byte]bool{}, attached: map[[16]byte]map[string][]string{}, rc: map[[16]byte]map[string]*recount{}}
	c.st.byState, c.st.decided, c.st.cbRan = map[string]int{}, map[string]int{}, map[string]int{}
	for job, m := range ev.members {
		c.scriptOf[job], c.known[job], c.root[job] = m.script, true, m.root
	}
	for _, s := range ev.spawns {
		c.scriptOf[s.child], c.known[s.child] = s.script, true
		if s.kind == "add" {
			c.st.added++
		} else {
			c.st.spawned++
		}
	}
	for wf, nodes := range ev.nodes {
		c.attached[wf] = map[string][]string{}
		c.rc[wf] = map[string]*recount{}
		for _, n := range nodes {
			if n.parent != "" {
				c.attached[wf][n.parent] = append(c.attached[wf][n.parent], n.name)
			}
			if n.job != nil {
				c.nodeOfJob[*n.job] = n
			}
		}
		for _, as := range c.attached[wf] {
			sort.Strings(as)
		}
	}
	c.checkStuck()
	for _, wf := range sortedIDs(ev.wfs) {
		c.checkWorkflow(ev.wfs[wf])
	}
	c.checkSpawns()
	return c.st, c.bad
}

// sortedIDs is m's keys in order, so that the violations come in one order.
func sortedIDs[V any](m map[[16]byte]V) [][16]byte {
	out := make([][16]byte, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b [16]byte) int { return strings.Compare(string(a[:]), string(b[:])) })
	return out
}

// sortedNames is a workflow's node names in order.
func sortedNames(m map[string]*nodeRow) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkStuck checks I3 over the schema: the inbox empty, nothing blocked, every scripted
// workflow and member there (in the archive when pruned), and in the retention schema
// every member job still there terminal.
func (c *wfCheck) checkStuck() {
	ev := c.ev
	if ev.inbox > 0 {
		c.fail(invWfStuck, "%d inbox rows never settled", ev.inbox)
	}
	if ev.blocked > 0 {
		c.fail(invWfStuck, "%d jobs still blocked", ev.blocked)
	}
	for _, id := range sortedIDs(ev.scripts) {
		if ev.wfs[id] == nil {
			c.fail(invWfStuck, "workflow %s was enqueued but does not exist (nor in the archive of pruned ones)", ulidStr(id))
		}
	}
	for _, job := range sortedIDs(ev.members) {
		m := ev.members[job]
		n := c.nodeOfJob[job]
		switch {
		case n == nil:
			c.fail(invWfStuck, "member %s (%s of workflow %s) has no node", ulidStr(job), m.node, ulidStr(m.wf))
		case n.wf != m.wf || n.name != m.node:
			c.fail(invWfStuck, "member %s is node %s of workflow %s, enqueued as %s of %s", ulidStr(job), n.name, ulidStr(n.wf), m.node, ulidStr(m.wf))
		}
	}
	if ev.retain {
		for _, job := range sortedIDs(c.nodeOfJob) {
			c.st.members++
			j := ev.jobs[job]
			switch {
			case j == nil:
				c.st.pruned++
			case j.state != "completed" && j.state != "dead" && j.state != "cancelled":
				c.fail(invWfStuck, "member %s is %s at quiescence", ulidStr(job), j.state)
			}
		}
	}
}

// checkWorkflow checks one workflow: I3 (finished, every node propagated), I4 (the
// recount), I5 (decisions, scripts, callbacks), I1 (starts and reads), I2 (releases), I6
// (its cancel).
func (c *wfCheck) checkWorkflow(w *wfRow) {
	ev := c.ev
	nodes := ev.nodes[w.id]
	if w.batch {
		c.st.batches++
	} else {
		c.st.workflows++
	}
	c.st.byState[w.state]++
	if w.archived {
		c.st.archived++
	}
	id := ulidStr(w.id)
	if w.state == "open" {
		c.fail(invWfStuck, "workflow %s is open at quiescence (open_nodes %d)", id, w.openNodes)
	}
	var unprop []string
	for _, name := range sortedNames(nodes) {
		n := nodes[name]
		c.st.nodes++
		if n.job != nil {
			c.st.jobNodes++
		}
		if n.outcome == "" || (n.job != nil && n.own == "") {
			unprop = append(unprop, fmt.Sprintf("%s (own %q, waiting %d, holds %d)", name, n.own, n.waiting, n.holds))
		}
	}
	if len(unprop) > 0 {
		c.fail(invWfStuck, "workflow %s (%s): nodes not propagated at quiescence: %s", id, w.state, strings.Join(unprop, "; "))
	}

	// I4: the recount.
	open := 0
	anyFail, anyCancel := false, false
	for _, name := range sortedNames(nodes) {
		n := nodes[name]
		x := c.recountNode(w.id, name)
		open += b2i(inWX(x.contrib))
		anyFail = anyFail || n.own == "fail" || n.own == "dfail"
		anyCancel = anyCancel || n.own == "cancel" || n.own == "del" || n.own == "dcancel"
		var diffs []string
		for _, f := range []struct {
			name        string
			stored, got int
		}{{"n_deps", n.nDeps, x.nDeps}, {"waiting", n.waiting, x.waiting}, {"n_fail", n.nFail, x.nFail}, {"n_cancel", n.nCancel, x.nCancel},
			{"n_skip", n.nSkip, x.nSkip}, {"holds", n.holds, x.holds}, {"h_fail", n.hFail, x.hFail}, {"h_cancel", n.hCancel, x.hCancel}} {
			if f.stored != f.got {
				diffs = append(diffs, fmt.Sprintf("%s %d (recount %d)", f.name, f.stored, f.got))
			}
		}
		if n.contrib != x.contrib {
			diffs = append(diffs, fmt.Sprintf("contrib %q (recount %q)", n.contrib, x.contrib))
		}
		if n.outcome != x.outcome {
			diffs = append(diffs, fmt.Sprintf("outcome %q (recount %q)", n.outcome, x.outcome))
		}
		if len(diffs) > 0 {
			c.fail(invWfCounters, "workflow %s node %s (own %q): %s", id, name, n.own, strings.Join(diffs, ", "))
		}
	}
	if w.openNodes != open || w.nodes != len(nodes) {
		c.fail(invWfCounters, "workflow %s: open_nodes %d (recount %d), nodes %d (recount %d)", id, w.openNodes, open, w.nodes, len(nodes))
	}
	if open == 0 && w.state != "open" {
		want := "succeeded"
		switch {
		case w.ffTripped || anyFail:
			want = "failed"
		case w.cancelReq != nil || anyCancel:
			want = "cancelled"
		}
		if w.state != want {
			c.fail(invWfCounters, "workflow %s is %s, its nodes say %s", id, w.state, want)
		}
	}

	ops := ev.ops[w.id]
	retried, cancelAsked := false, false
	var cancelReturned *time.Time
	for _, o := range ops {
		if o.op == "retried" && o.err == "" {
			retried = true
		}
		// A cancel that failed may have committed; one the workflow had finished before
		// did nothing.
		if o.op == "cancel" && !strings.Contains(o.err, venturi.ErrWorkflowFinished.Error()) {
			cancelAsked = true
		}
		if o.op == "cancel" && o.err == "" && cancelReturned == nil {
			t := o.done
			cancelReturned = &t
		}
	}
	if retried {
		c.st.retries++
	}
	if cancelReturned != nil {
		c.st.cancels++
	}
	// A cancel happened (CancelWorkflow, or a fail-fast that tripped: a member failed, now
	// or before a retry).
	cancelled := cancelAsked || w.cancelReq != nil || w.ffTripped || (w.failFast && (anyFail || retried))

	for _, name := range sortedNames(nodes) {
		n := nodes[name]
		if n.job == nil {
			c.checkGroup(w, n, cancelled)
			continue
		}
		c.checkDecision(w, n, cancelled, retried)
		c.checkScript(w, n, cancelled, retried)
		c.checkReleases(w, n)
		c.checkStarts(w, n)
		c.checkReads(w, n)
		c.checkOutput(w, n)
		if cancelReturned != nil {
			c.checkCancel(w, n, *cancelReturned)
		}
	}
	if w.batch {
		c.checkBatch(w, retried)
	}
}

// checkGroup checks a group's own outcome (I5): ok once sealed, cancel when its workflow
// was cancelled while it was open.
func (c *wfCheck) checkGroup(w *wfRow, n *nodeRow, cancelled bool) {
	switch {
	case n.sealed && n.own != "ok":
		c.fail(invWfPropagate, "workflow %s: sealed group %s has own %q", ulidStr(w.id), n.name, n.own)
	case !n.sealed && (n.own != "cancel" || !cancelled):
		c.fail(invWfPropagate, "workflow %s: group %s is still open (own %q) at quiescence", ulidStr(w.id), n.name, n.own)
	}
}

// checkDecision checks I5 for a job node: a node released to run had its policy met by
// what it needs as they finally ended (a compensation keeps its run when the failure it
// answered was retried away); a node decided without a run was decided as those outcomes
// decide (its decision relabelled when they changed), or by its workflow's cancel when they
// allowed it to run; and a decided node never started.
func (c *wfCheck) checkDecision(w *wfRow, n *nodeRow, cancelled, retried bool) {
	id := ulidStr(w.id)
	x := c.recountNode(w.id, n.name)
	dec := wfDecide(n.policy, x)
	pol := venturi.Policy(n.policy).String()
	switch {
	case n.run != "":
		c.st.ran++
		if !n.released {
			c.fail(invWfPropagate, "workflow %s: node %s ended by its job (%s) but was never released", id, n.name, n.run)
		}
		if dec != "release" && !(retried && n.policy != 0) {
			c.fail(invWfPropagate, "workflow %s: node %s (%s of %s) ran (%s), but what it needs decides %q (waiting %d, failed %d, cancelled %d, skipped %d of %d)",
				id, n.name, pol, strings.Join(n.deps, ","), n.run, dec, x.waiting, x.nFail, x.nCancel, x.nSkip, x.nDeps)
		}
	case n.own == "dfail" || n.own == "dcancel" || n.own == "skip":
		c.st.decided[n.own]++
		if dec != n.own {
			c.fail(invWfPropagate, "workflow %s: node %s (%s of %s) decided %s, but what it needs decides %q (waiting %d, failed %d, cancelled %d, skipped %d of %d)",
				id, n.name, pol, strings.Join(n.deps, ","), n.own, dec, x.waiting, x.nFail, x.nCancel, x.nSkip, x.nDeps)
		}
	case n.own == "cancel":
		c.st.decided["cancel"]++
		if !cancelled {
			c.fail(invWfPropagate, "workflow %s: node %s decided cancel, but the workflow was never cancelled", id, n.name)
		}
		if dec != "release" && dec != "" {
			c.fail(invWfPropagate, "workflow %s: node %s kept its cancel, but what it needs now decides %s", id, n.name, dec)
		}
	}
	if n.run == "" && n.own != "" {
		// Decided without a run: no handler ever started, unless a retry brought it back
		// in between.
		job := *n.job
		if ss := c.liveStarts(job); len(ss) > 0 && !c.reopened(job) {
			c.fail(invWfPropagate, "workflow %s: node %s was decided %s but its job started %d time(s) (first run %d at %s)",
				id, n.name, n.own, len(ss), ss[0].run, ss[0].at.Format("15:04:05.000"))
		}
	}
}

// liveStarts are a job's handler starts, but those of runs whose claim an asynchronous
// failover lost.
func (c *wfCheck) liveStarts(job [16]byte) []startRow {
	var out []startRow
	j := c.ev.jobs[job]
	for _, s := range c.ev.starts[job] {
		if j != nil && zombieWrite(s.token, s.at, j.journal, c.ev.lossy) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// reopened says whether a job's journal has a retry or a revival.
func (c *wfCheck) reopened(job [16]byte) bool {
	j := c.ev.jobs[job]
	if j == nil {
		return false
	}
	for _, en := range j.journal {
		if en.Event == "retried" || en.Event == "revived" {
			return true
		}
	}
	return false
}

// checkScript checks I5 for a job node that ran: its job ended as scripted (a run ends
// cancelled only in a cancelled workflow; a member scripted once completes after its
// workflow's retry, and fails without one).
func (c *wfCheck) checkScript(w *wfRow, n *nodeRow, cancelled, retried bool) {
	script, ok := c.scriptOf[*n.job]
	if !ok {
		if n.name == venturi.BatchOnSuccess || n.name == venturi.BatchOnEnd || n.name == venturi.BatchOnFailure {
			script = wfOK
		} else {
			return // checkSpawns reports a job nobody enqueued
		}
	}
	bad := false
	switch n.run {
	case "":
		return
	case "ok":
		bad = script == wfPermanent || script == wfOnce && !retried
	case "fail":
		bad = script != wfPermanent && !(script == wfOnce && !retried)
	case "cancel":
		bad = !cancelled
	default:
		bad = true
	}
	if bad {
		c.fail(invWfPropagate, "workflow %s: node %s scripted %s%s ended %s", ulidStr(w.id), n.name, script,
			map[bool]string{true: " (workflow retried)", false: ""}[retried], n.run)
	}
}

// checkReleases checks I2 on a job node's journal: at most one release (unblocked) per
// arming (the enqueue, each revival, each retry), none for a node released as it was
// written, and no run of a node that was not released.
func (c *wfCheck) checkReleases(w *wfRow, n *nodeRow) {
	job := *n.job
	j := c.ev.jobs[job]
	if j == nil {
		return // pruned: its journal is gone
	}
	released := c.root[job]
	for _, en := range j.journal {
		switch {
		case en.Event == "unblocked":
			c.st.releases++
			if released {
				c.fail(invWfRelease, "workflow %s: node %s released twice in one arming (%s)", ulidStr(w.id), n.name, eventsAt(j.journal))
			}
			released = true
		case en.Event == "revived" || en.Event == "retried":
			if en.Event == "revived" {
				c.st.revived++
			} else {
				c.st.retriedEntries++
			}
			released = false
		case endEvents[en.Event] && en.Run > 0:
			if !released {
				c.fail(invWfRelease, "workflow %s: node %s ran (run %d) without a release (%s)", ulidStr(w.id), n.name, en.Run, eventsAt(j.journal))
				released = true
			}
		}
	}
}

// eventsAt lists a journal's events with their times, for a violation.
func eventsAt(es []venturi.JournalEntry) string {
	var s []string
	for _, e := range es {
		t := e.At
		if t.IsZero() {
			t = e.StartedAt
		}
		if e.Run > 0 {
			s = append(s, fmt.Sprintf("%s#%d@%s", e.Event, e.Run, t.Format("15:04:05.000")))
		} else {
			s = append(s, fmt.Sprintf("%s@%s", e.Event, t.Format("15:04:05.000")))
		}
	}
	return strings.Join(s, ",")
}

// upstream is what a node waits for: the nodes it needs and every node attached to them,
// at any depth (a group's members, a spawner's children), job nodes only.
func (c *wfCheck) upstream(w *wfRow, n *nodeRow) []*nodeRow {
	nodes := c.ev.nodes[w.id]
	seen := map[string]bool{}
	var out []*nodeRow
	var walk func(string)
	walk = func(name string) {
		if seen[name] || nodes[name] == nil {
			return
		}
		seen[name] = true
		if nodes[name].job != nil {
			out = append(out, nodes[name])
		}
		for _, a := range c.attached[w.id][name] {
			walk(a)
		}
	}
	for _, d := range n.deps {
		walk(d)
	}
	return out
}

// mark is a time in a node's history: an end (and whether a failure), or a reopening.
type mark struct {
	at     time.Time
	end    bool
	failed bool
	done   bool // a completion
}

// marks are a job node's ends and reopenings, by the best bound of each the evidence
// gives: a completion's effect (written in its transaction, before its commit), a failed or
// cancelled run's end (the handler's return, before the worker wrote it), a decision's
// entry (the settle's transaction time); the node's ended_at (its last end, set in the
// settle that recorded it). All are no later than the commit that let what needs the node
// run.
func (c *wfCheck) marks(n *nodeRow) []mark {
	var out []mark
	job := *n.job
	if j := c.ev.jobs[job]; j != nil {
		for _, en := range j.journal {
			switch {
			case en.Event == venturi.EventCompleted && en.Run > 0:
				at := en.StartedAt
				for _, ef := range c.ev.effects[job] {
					if ef.outcome == "completed" && ef.token == en.Token {
						at = ef.at
					}
				}
				out = append(out, mark{at: at, end: true, done: true})
			case (en.Event == venturi.EventDead || en.Event == venturi.EventCancelled) && en.Run > 0:
				out = append(out, mark{at: en.At, end: true, failed: en.Event == venturi.EventDead})
			case en.Event == "upstream_failed" || en.Event == "upstream_cancelled" || en.Event == "skipped" ||
				en.Event == venturi.EventCancelled && en.Run == 0:
				out = append(out, mark{at: en.At, end: true, failed: en.Event == "upstream_failed"})
			case en.Event == "retried" || en.Event == "revived":
				out = append(out, mark{at: en.At})
			}
		}
	} else {
		for _, ef := range c.ev.effects[job] {
			if ef.outcome == "completed" {
				out = append(out, mark{at: ef.at, end: true, done: true})
			}
		}
	}
	if n.endedAt != nil {
		out = append(out, mark{at: *n.endedAt, end: true, failed: n.own == "fail" || n.own == "dfail", done: n.own == "ok"})
	}
	slices.SortStableFunc(out, func(a, b mark) int { return a.at.Compare(b.at) })
	return out
}

// endedBefore says whether a node had ended at t, and not been reopened since.
func endedBefore(ms []mark, t time.Time) bool {
	ended := false
	for _, m := range ms {
		if !m.at.Before(t) {
			break
		}
		ended = m.end
	}
	return ended
}

// failedBefore says whether a node had failed before t.
func failedBefore(ms []mark, t time.Time) bool {
	for _, m := range ms {
		if m.at.Before(t) && m.failed {
			return true
		}
	}
	return false
}

// completedBefore says whether a node had completed before t.
func completedBefore(ms []mark, t time.Time) bool {
	for _, m := range ms {
		if m.at.Before(t) && m.done {
			return true
		}
	}
	return false
}

// checkStarts checks I1 on a node's handler starts: each began after everything it waits
// for had ended (Needs, NeedsEnded), or after one of them had failed (NeedsFailure).
func (c *wfCheck) checkStarts(w *wfRow, n *nodeRow) {
	ss := c.liveStarts(*n.job)
	if len(ss) == 0 {
		return
	}
	up := c.upstream(w, n)
	if len(up) == 0 {
		return
	}
	marks := make([][]mark, len(up))
	for i, u := range up {
		marks[i] = c.marks(u)
	}
	for _, s := range ss {
		if n.policy == int(venturi.PolicyFailed) {
			ok := false
			for i := range up {
				ok = ok || failedBefore(marks[i], s.at)
			}
			if !ok {
				c.fail(invWfEarly, "workflow %s: node %s (failed of %s) started run %d at %s before anything it waits for failed",
					ulidStr(w.id), n.name, strings.Join(n.deps, ","), s.run, s.at.Format("15:04:05.000000"))
			}
			continue
		}
		for i, u := range up {
			if c.spawnedAfter(w, u, s.at) {
				continue // spawned by a later run of its spawner, whose earlier end released this one
			}
			if !endedBefore(marks[i], s.at) {
				c.fail(invWfEarly, "workflow %s: node %s (%s of %s) started run %d at %s before %s ended (%s)",
					ulidStr(w.id), n.name, venturi.Policy(n.policy), strings.Join(n.deps, ","), s.run, s.at.Format("15:04:05.000000"),
					u.name, marksString(marks[i]))
			}
		}
	}
}

// spawnedAfter reports whether u is a node that a run of a job node spawned (its parent
// is a job's node, not a group) after at. A spawner's children are attached with the end
// of the run that spawned them: a node released by an earlier end of the spawner (a run
// that failed, then a retry) started before they existed, rightly. The spawner itself is
// upstream too, so a start before any of its ends is still caught; a group's members are
// not exempt (a group takes members only while open, and an open group holds back what
// needs it).
func (c *wfCheck) spawnedAfter(w *wfRow, u *nodeRow, at time.Time) bool {
	p := c.ev.nodes[w.id][u.parent]
	return u.parent != "" && p != nil && p.job != nil && u.createdAt.After(at)
}

func marksString(ms []mark) string {
	var s []string
	for _, m := range ms {
		k := "reopened"
		switch {
		case m.done:
			k = "completed"
		case m.failed:
			k = "failed"
		case m.end:
			k = "ended"
		}
		s = append(s, k+"@"+m.at.Format("15:04:05.000000"))
	}
	if len(s) == 0 {
		return "no end"
	}
	return strings.Join(s, ",")
}

// checkReads checks I1 on what a node's runs read: every output a run read is the final
// output of a node it waits for (written by the completion that committed), and a run of
// a Needs or NeedsEnded node read the output of everything it waits for that had completed
// when it started.
func (c *wfCheck) checkReads(w *wfRow, n *nodeRow) {
	job := *n.job
	reads := c.ev.reads[job]
	if len(reads) == 0 {
		return
	}
	type runKey struct {
		run   int
		token int64
	}
	byRun := map[runKey][]readRow{}
	var keys []runKey
	for _, x := range reads {
		k := runKey{x.run, x.token}
		if byRun[k] == nil {
			keys = append(keys, k)
		}
		byRun[k] = append(byRun[k], x)
	}
	up := c.upstream(w, n)
	upByName := map[string]*nodeRow{}
	for _, u := range up {
		upByName[u.name] = u
	}
	j := c.ev.jobs[job]
	for _, k := range keys {
		rs := byRun[k]
		if j != nil && zombieWrite(k.token, rs[0].at, j.journal, c.ev.lossy) {
			continue
		}
		marker := false
		got := map[string]bool{}
		for _, x := range rs {
			if x.node == "" {
				marker = true
				continue
			}
			c.st.reads++
			if x.pruned {
				c.st.readsPruned++
			}
			got[x.node] = true
			out, ok := c.ev.outputs[w.id][x.node]
			switch {
			case upByName[x.node] == nil:
				c.fail(invWfEarly, "workflow %s: node %s run %d read the output of %s, which it does not wait for", ulidStr(w.id), n.name, k.run, x.node)
			case !ok:
				c.fail(invWfEarly, "workflow %s: node %s run %d read an output of %s (token %d), which has none", ulidStr(w.id), n.name, k.run, x.node, x.outTok)
			case out.token != x.outTok:
				c.fail(invWfEarly, "workflow %s: node %s run %d read %s's output of token %d; its final output is token %d", ulidStr(w.id), n.name, k.run, x.node, x.outTok, out.token)
			}
		}
		if !marker || n.policy == int(venturi.PolicyFailed) {
			continue
		}
		var start time.Time
		for _, s := range c.ev.starts[job] {
			if s.run == k.run && s.token == k.token {
				start = s.at
			}
		}
		if start.IsZero() {
			continue
		}
		for _, u := range up {
			if !got[u.name] && completedBefore(c.marks(u), start) {
				c.fail(invWfEarly, "workflow %s: node %s run %d did not read the output of %s, which completed before it started", ulidStr(w.id), n.name, k.run, u.name)
			}
		}
	}
}

// checkOutput checks I1's outputs: a node that completed has an output, written by the
// run whose completion committed (its token, the completion's effect's, the output's
// own), and a node that did not complete has none.
func (c *wfCheck) checkOutput(w *wfRow, n *nodeRow) {
	job := *n.job
	out, ok := c.ev.outputs[w.id][n.name]
	switch {
	case n.run == "ok" && !ok:
		c.fail(invWfEarly, "workflow %s: node %s completed without an output", ulidStr(w.id), n.name)
		return
	case n.run != "ok" && ok:
		c.fail(invWfEarly, "workflow %s: node %s (run %q) has an output (token %d)", ulidStr(w.id), n.name, n.run, out.token)
		return
	case !ok:
		return
	}
	if out.held != out.token {
		c.fail(invWfEarly, "workflow %s: node %s's output was written under token %d but holds token %d", ulidStr(w.id), n.name, out.token, out.held)
	}
	var tokens []int64
	for _, ef := range c.ev.effects[job] {
		if ef.outcome == "completed" {
			tokens = append(tokens, ef.token)
		}
	}
	if len(tokens) == 1 && tokens[0] != out.token {
		c.fail(invWfEarly, "workflow %s: node %s's output has token %d, its committed completion token %d", ulidStr(w.id), n.name, out.token, tokens[0])
	}
}

// checkCancel checks I6 for a job node of a workflow whose CancelWorkflow returned at t:
// none of its runs was claimed, and it was not released, after t. A handler that starts
// after t a run claimed before it is counted (the worker had it in its prefetch buffer).
func (c *wfCheck) checkCancel(w *wfRow, n *nodeRow, t time.Time) {
	job := *n.job
	j := c.ev.jobs[job]
	claimed := map[int64]time.Time{}
	if j != nil {
		for _, en := range j.journal {
			switch {
			case endEvents[en.Event] && en.Run > 0 && !en.StartedAt.IsZero():
				claimed[en.Token] = en.StartedAt
				if en.StartedAt.After(t) {
					c.fail(invWfCancel, "workflow %s: node %s run %d was claimed at %s, after CancelWorkflow returned at %s",
						ulidStr(w.id), n.name, en.Run, en.StartedAt.Format("15:04:05.000000"), t.Format("15:04:05.000000"))
				}
			case en.Event == "unblocked" && en.At.After(t):
				c.fail(invWfCancel, "workflow %s: node %s was released at %s, after CancelWorkflow returned at %s",
					ulidStr(w.id), n.name, en.At.Format("15:04:05.000000"), t.Format("15:04:05.000000"))
			}
		}
	}
	for _, s := range c.liveStarts(job) {
		if !s.at.After(t) {
			continue
		}
		switch at, found := claimed[s.token]; {
		case found && !at.After(t):
			c.st.startsAfterCancel++
		case !found:
			c.fail(invWfCancel, "workflow %s: node %s run %d started at %s, after CancelWorkflow returned at %s, with no claim on record",
				ulidStr(w.id), n.name, s.run, s.at.Format("15:04:05.000000"), t.Format("15:04:05.000000"))
		}
	}
}

// checkBatch checks a batch's callbacks: each completed at most once (I2), and one that
// completed saw the counts its condition promises (I5): on_success and on_end the final
// ones, nothing pending; on_failure at least one failure, and no more than finally.
func (c *wfCheck) checkBatch(w *wfRow, retried bool) {
	nodes := c.ev.nodes[w.id]
	id := ulidStr(w.id)
	var total, succ, failed, cancelled int
	for _, m := range c.attached[w.id][venturi.BatchMembers] {
		total++
		switch o := nodes[m].outcome; {
		case o == "ok":
			succ++
		case o == "fail" || o == "dfail":
			failed++
		case o != "":
			cancelled++
		}
	}
	for _, which := range []string{venturi.BatchOnSuccess, venturi.BatchOnEnd, venturi.BatchOnFailure} {
		n := nodes[which]
		if n == nil || n.job == nil {
			continue
		}
		rows := c.ev.cbs[*n.job]
		if n.run == "ok" {
			c.st.cbRan[which]++
		}
		if len(rows) > 1 {
			c.fail(invWfRelease, "batch %s: %s completed %d times", id, which, len(rows))
		}
		if j := c.ev.jobs[*n.job]; j != nil {
			done := 0
			for _, en := range j.journal {
				done += b2i(en.Event == venturi.EventCompleted)
			}
			if done > 1 {
				c.fail(invWfRelease, "batch %s: %s has %d completed runs", id, which, done)
			}
		}
		if len(rows) == 0 || retried {
			continue
		}
		x := rows[0]
		switch which {
		case venturi.BatchOnFailure:
			if x.failed < 1 || x.total > total || x.succeeded > succ || x.failed > failed {
				c.fail(invWfPropagate, "batch %s: on_failure saw total %d, succeeded %d, failed %d, cancelled %d, pending %d; finally %d, %d, %d, %d",
					id, x.total, x.succeeded, x.failed, x.cancelled, x.pending, total, succ, failed, cancelled)
			}
		default:
			if x.total != total || x.succeeded != succ || x.failed != failed || x.cancelled != cancelled || x.pending != 0 {
				c.fail(invWfPropagate, "batch %s: %s saw total %d, succeeded %d, failed %d, cancelled %d, pending %d; the members' nodes say %d, %d, %d, %d, 0",
					id, which, x.total, x.succeeded, x.failed, x.cancelled, x.pending, total, succ, failed, cancelled)
			}
		}
	}
}

// checkSpawns checks I7: every node a member spawned (or added to its batch) by a
// committed completion exists, attached to that member (or to the batch's members), with
// that job; a spawner that completed spawned as many as scripted, under the token of its
// completion; and every job node was enqueued by some record (the driver's, or a
// spawner's).
func (c *wfCheck) checkSpawns() {
	ev := c.ev
	perSpawner := map[[16]byte]int{}
	for _, s := range ev.spawns {
		sp := c.nodeOfJob[s.job]
		if sp == nil {
			c.fail(invWfSpawn, "%s %s by job %s, which is no node", s.kind, s.node, ulidStr(s.job))
			continue
		}
		perSpawner[s.job] += b2i(s.kind == "spawn")
		n := ev.nodes[sp.wf][s.node]
		parent := sp.name
		if s.kind == "add" {
			parent = venturi.BatchMembers
		}
		switch {
		case n == nil:
			c.fail(invWfSpawn, "workflow %s: %s recorded %s %s, which does not exist", ulidStr(sp.wf), sp.name, s.kind, s.node)
		case n.parent != parent:
			c.fail(invWfSpawn, "workflow %s: %s %s by %s is attached to %q, not %q", ulidStr(sp.wf), s.kind, s.node, sp.name, n.parent, parent)
		case n.job == nil || *n.job != s.child:
			c.fail(invWfSpawn, "workflow %s: %s %s by %s has another job than the one recorded", ulidStr(sp.wf), s.kind, s.node, sp.name)
		}
		if j := ev.jobs[s.job]; j != nil {
			okTok := false
			for _, en := range j.journal {
				okTok = okTok || en.Event == venturi.EventCompleted && en.Token == s.token
			}
			if !okTok {
				c.fail(invWfSpawn, "workflow %s: %s recorded %s %s under token %d, which completed no run of it (%s)",
					ulidStr(sp.wf), sp.name, s.kind, s.node, s.token, events(j.journal))
			}
		}
	}
	for _, job := range sortedIDs(c.nodeOfJob) {
		n := c.nodeOfJob[job]
		if !c.known[job] && n.name != venturi.BatchOnSuccess && n.name != venturi.BatchOnEnd && n.name != venturi.BatchOnFailure {
			c.fail(invWfSpawn, "workflow %s: node %s (attached to %q) was enqueued by no record", ulidStr(n.wf), n.name, n.parent)
		}
		if m, ok := ev.members[job]; ok && m.spawns >= 0 && n.run == "ok" && perSpawner[job] != m.spawns {
			c.fail(invWfSpawn, "workflow %s: spawner %s completed with %d spawned nodes recorded, scripted %d", ulidStr(n.wf), n.name, perSpawner[job], m.spawns)
		}
	}
}

// printWorkflows writes the workflow, chunk and deadlock lines of the summary.
func (r *report) printWorkflows(w io.Writer) {
	if r.wf == nil && r.chunk.calls == 0 && r.deadlocks == nil {
		return
	}
	fmt.Fprintf(w, "workflows, batches, chunks\n")
	if r.wf != nil {
		fmt.Fprintf(w, "  %s\n", r.wf)
		if r.wf.startsAfterCancel > 0 {
			fmt.Fprintf(w, "  %d handler starts after CancelWorkflow returned, of runs claimed before it (prefetched)\n", r.wf.startsAfterCancel)
		}
	}
	if s := r.wfRetain; s != nil {
		fmt.Fprintf(w, "  retention schema (RetainCompleted %v): %s\n", retainCompleted, s)
		fmt.Fprintf(w, "    member jobs pruned by the end %d of %d; workflows pruned (checked from the archive) %d; reads of outputs whose job was already pruned %d\n",
			s.pruned, s.members, s.archived, s.readsPruned)
	}
	r.printChunks(w)
	if r.deadlocks != nil {
		fmt.Fprintf(w, "  deadlocks (pg_stat_database, sampled every second): %d\n", *r.deadlocks)
	}
}
