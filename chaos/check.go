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
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// The checker reads everything from the database (the schema of the run): the jobs and
// their journals, chaos_expect, chaos_start, chaos_effect and chaos_fault.

type checkConfig struct {
	lease   time.Duration
	control bool
	// The completion ledger (ledger.go), when the workers wrote one.
	checkLedger bool
	ledger      []ledgerEntry
	ledgerTorn  int
	// retain is the retention schema (wfdriver.go), when the run has one.
	retain *pgxpool.Pool
	// deadlocks is pg_stat_database.deadlocks over the run, when the driver sampled it.
	deadlocks *int64
}

type jobRow struct {
	id       [16]byte
	kind     string
	queue    string
	state    string
	runs     int
	failures int
	part     *string // NULL: plain
	slotKey  *string
	slotLim  *int
	slotPol  *int
	moved    int64                  // journal_moved: entries moved to venturi_journal (or dropped)
	journal  []venturi.JournalEntry // the whole journal: moved entries, then the row's
}

type startRow struct {
	run    int
	token  int64
	worker int
	pid    int
	at     time.Time
}

type effectRow struct {
	run     int
	token   int64
	outcome string
	counter int
	value   int64
	at      time.Time // clock_timestamp() in its transaction, before the commit
}

type faultRow struct {
	kind   string
	at     time.Time
	until  time.Time
	worker int
	pid    int
	detail string
}

type expectRow struct {
	scenario string
	state    string // one state, or several: a|b
	pauses   int
	value    int64
	group    string // flow scenarios: the burst
	slotKey  string
	slotLim  int
	part     string
	steps    int // steps: memoized steps
}

// endEvents are the events that end a run. replaced and cancelled end a run when they
// name one (Run > 0: a run asked to stop, by a newer job of its slot or by a cancel of its
// job or workflow); without a run they record a job stopped before any run began.
var endEvents = map[venturi.Event]bool{
	venturi.EventCompleted: true, venturi.EventPaused: true, venturi.EventFailed: true,
	venturi.EventDead: true, venturi.EventAbandoned: true, venturi.EventInterrupted: true,
	venturi.EventReplaced: true, venturi.EventWaiting: true, venturi.EventCancelled: true,
}

// report is the checker's result.
type report struct {
	lease           time.Duration
	control         bool
	jobs            int
	byScenario      map[string]*scenarioCount
	faults          map[string]int
	faultDetail     []string
	runs            int // ended runs in journals
	starts          int
	disturbed       map[string]int // runs cut by a fault (with or without a start), by cause
	dupStarts       map[string]int // cut runs whose handler had started, by cause
	unattributed    int
	killRecovery    []time.Duration
	killNoNext      int
	killCompound    int
	killRecoveryAll []time.Duration
	killGated       int // cut runs of flow-controlled jobs: their next start waits for a gate
	killRescue      []time.Duration
	killClaim       []time.Duration
	halfOpenRec     []time.Duration // half-open cut -> next start (netcheck.go)
	halfOpenRescue  []time.Duration // half-open cut -> the run's rescue
	halfOpenNoNext  int
	halfOpenMixed   int // cuts whose window meets another fault (isolated)
	pgRecovery      []string
	pgWorst         time.Duration
	invariants      []invariant
	violations      []string
	journalMoved    int // entries read from venturi_journal
	gates           []gateResult
	flowEnds        map[string]map[string]int // drop and replace: jobs by final state
	burstJobs       map[string][]string       // drop and replace: each burst's jobs, described for a violation
	dropped         int                       // dropped entries
	replaced        int                       // replaced entries
	coord           coordStats                // steps and wait scenarios
	singleton       string                    // the singleton's summary (singletoncheck.go)
	cron            string                    // the cron schedule's summary (croncheck.go)
	events          string                    // the event stream's summary (eventcheck.go)
	ledger          string                    // the completion ledger's summary (ledger.go)
	wf, wfRetain    *wfStats                  // the workflows of each schema (wfcheck.go)
	chunk           chunkStats                // chunkcheck.go
	deadlocks       *int64                    // over the run, when sampled
	zombieStarts    int                       // async failover: handler starts of runs whose claim the failover lost
	lossy           *faultRow                 // the asynchronous failover, if any
	extra           string                    // the figures of a mode (overload.go, failover.go, fulldisk.go, longtx.go)
}

type scenarioCount struct{ want, got int }

type invariant struct {
	name string
	bad  int
}

func (r *report) fail(inv string, format string, a ...any) {
	for i := range r.invariants {
		if r.invariants[i].name == inv {
			r.invariants[i].bad++
		}
	}
	r.violations = append(r.violations, inv+": "+fmt.Sprintf(format, a...))
}

const (
	invLost      = "0 lost: every job in its scripted terminal state"
	invOnce      = "no job completed twice (journal and effects)"
	invStale     = "no effect committed under a stale token"
	invDead      = "dead set = scripted permanent + undecodable"
	invOneEnd    = "every run has exactly one end"
	invCarry     = "carried counters = pauses"
	invDedup     = "dedup merges hold (effect value = merged sum)"
	invDupStarts = "duplicate starts only for runs cut by a recorded fault"
	invControl   = "control run: 0 duplicate starts"
	invKillRec   = "p99 isolated kill -> next start <= lease + 2s"
	invPGRec     = "claiming resumes <= 10s after PostgreSQL is back (restart, promotion, disk freed)"
	invSlot      = "no slot ever runs more than its limit (journal times)"
	invKindConc  = "kind concurrency never exceeded (journal times)"
	invQueueConc = "queue concurrency never exceeded (journal times)"
	invRate      = "no rate window holds more starts than N (per partition)"
	invFlowEnd   = "flow jobs end as scripted (slot, drop, replace, gated)"
)

// check reads a run's records from the database and checks the invariants on them, one
// function per invariant (or per group of a job's evidence), always in this order: a job's
// violations are listed in the same order from one run to the next.
func check(ctx context.Context, pool *pgxpool.Pool, cfg checkConfig) (*report, error) {
	r := newReport(cfg)
	d, err := loadRun(ctx, pool, r)
	if err != nil {
		return nil, err
	}

	r.jobs = len(d.expects)
	r.checkEveryJobEnqueued(d)
	var p perJobEvidence
	p.groupDone = map[string]int{} // drop and replace bursts: completed jobs
	for id, e := range d.expects {
		j := r.checkTerminalState(id, e, d.jobs[id])
		if j == nil {
			continue
		}
		h := r.historyOf(id, j, d.effects[id])
		r.checkOneEnd(h)
		r.checkEffectTokens(h)
		r.checkCompletedOnce(h, e, d.starts[id])
		r.checkScriptedResults(h, e)
		r.checkStarts(h, d.starts[id], d.lossy)
		r.checkDisturbedRuns(h, e, d, cfg, &p)
		r.checkCoordination(h, e, d.coord)
		// Flow control: the runs for the gates, and the scripted ends.
		r.checkFlowJob(id, e, j, &p.flowRuns, p.groupDone)
	}
	r.checkGates(p.flowRuns, p.groupDone)
	r.checkControl(cfg)
	r.checkChunks(d)
	if err := r.checkWorkflows(ctx, pool, d, cfg); err != nil {
		return nil, err
	}
	r.checkDeadlocks(cfg)

	r.measureKillRecovery(p.cuts, d, cfg)
	r.checkHalfOpen(p.hoCuts, d.faults, d.starts, cfg)
	r.checkKillRecovery(cfg)
	r.checkPGRecovery(d)
	if err := r.checkSingleton(ctx, pool); err != nil {
		return nil, err
	}
	if err := r.checkCron(ctx, pool); err != nil {
		return nil, err
	}
	if err := r.checkEvents(ctx, pool); err != nil {
		return nil, err
	}
	if cfg.checkLedger {
		r.checkLedgerRecords(cfg, d)
	}
	return r, nil
}

// newReport is an empty report holding the invariants that every run checks, and those
// of its kind of run (a control run's, or a faulty run's).
func newReport(cfg checkConfig) *report {
	r := &report{lease: cfg.lease, control: cfg.control, byScenario: map[string]*scenarioCount{},
		faults: map[string]int{}, disturbed: map[string]int{}, dupStarts: map[string]int{},
		flowEnds: map[string]map[string]int{}}
	for _, n := range []string{invLost, invOnce, invStale, invDead, invOneEnd, invCarry, invDedup, invDupStarts,
		invSlot, invKindConc, invQueueConc, invRate, invFlowEnd, invSteps, invSignals,
		invWfEarly, invWfRelease, invWfStuck, invWfCounters, invWfPropagate, invWfCancel, invWfSpawn, invChunk} {
		r.invariants = append(r.invariants, invariant{name: n})
	}
	if cfg.control {
		r.invariants = append(r.invariants, invariant{name: invControl})
	} else {
		r.invariants = append(r.invariants, invariant{name: invKillRec}, invariant{name: invPGRec})
	}
	return r
}

// runRecords is what a run left in the database, as check reads it.
type runRecords struct {
	expects map[[16]byte]expectRow
	jobs    map[[16]byte]*jobRow
	starts  map[[16]byte][]startRow
	effects map[[16]byte][]effectRow
	faults  []faultRow
	coord   *coordEvidence
	chunks  []chunkItemRow // chaos_chunk_item (chunkcheck.go)
	// lossy is the asynchronous failover, if any: it loses the end of the old primary's
	// history.
	lossy *faultRow
}

// loadRun reads the run's records: chaos_expect, the jobs (their journals whole, with the
// entries moved to venturi_journal first), chaos_start, chaos_effect, chaos_fault and the
// coordination evidence. It counts into r what the report shows of them.
func loadRun(ctx context.Context, pool *pgxpool.Pool, r *report) (*runRecords, error) {
	expects := map[[16]byte]expectRow{}
	rows, err := pool.Query(ctx, `SELECT job_id, scenario, want_state, want_pauses, want_value, grp, slot_key, slot_limit, part, want_steps FROM chaos_expect`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var e expectRow
		if err := rows.Scan(&id, &e.scenario, &e.state, &e.pauses, &e.value, &e.group, &e.slotKey, &e.slotLim, &e.part, &e.steps); err != nil {
			return nil, err
		}
		expects[id.Bytes] = e
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	jobs, moved, err := loadJobs(ctx, pool, `kind NOT IN ('`+singletonKind+`', '`+cronKind+`')`) // singletoncheck.go, croncheck.go check them
	if err != nil {
		return nil, err
	}
	r.journalMoved += moved
	// Nodes that members spawned, and members that members added to their batch, were
	// enqueued by the workers: the records written with their spawner's completion
	// (chaos_spawn) expect them (wfdriver.go).
	rows, err = pool.Query(ctx, `SELECT child FROM chaos_spawn`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		if _, ok := expects[id.Bytes]; !ok {
			expects[id.Bytes] = expectRow{scenario: scSpawned, state: "completed|dead|cancelled"}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	starts, err := loadStarts(ctx, pool)
	if err != nil {
		return nil, err
	}
	for _, ss := range starts {
		r.starts += len(ss)
	}
	effects, err := loadEffects(ctx, pool)
	if err != nil {
		return nil, err
	}
	var faults []faultRow
	rows, err = pool.Query(ctx, `SELECT kind, at, COALESCE(until, at), worker, pid, detail FROM chaos_fault ORDER BY at`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var f faultRow
		if err := rows.Scan(&f.kind, &f.at, &f.until, &f.worker, &f.pid, &f.detail); err != nil {
			return nil, err
		}
		faults = append(faults, f)
		r.faults[f.kind]++
		if f.kind != "sigkill" {
			r.faultDetail = append(r.faultDetail, fmt.Sprintf("%-22s at %s, %v%s", f.kind, f.at.Format("15:04:05.000"),
				f.until.Sub(f.at).Round(time.Millisecond), map[bool]string{true: "", false: ", " + f.detail}[f.detail == ""]))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	coord, err := loadCoord(ctx, pool)
	if err != nil {
		return nil, err
	}
	chunks, err := loadChunkItems(ctx, pool)
	if err != nil {
		return nil, err
	}
	// An asynchronous failover loses the end of the old primary's history: a worker can
	// hold a run whose claim the new primary never received, and its unfenced writes
	// (start rows) land on the new primary.
	lossy := lossyFailover(faults)
	r.lossy = lossy
	return &runRecords{expects: expects, jobs: jobs, starts: starts, effects: effects, faults: faults,
		coord: coord, chunks: chunks, lossy: lossy}, nil
}

// loadJobs reads the jobs that match cond (an SQL condition on venturi_job_all) with their
// whole journals: the entries moved to venturi_journal first. It returns how many entries
// it read from venturi_journal.
func loadJobs(ctx context.Context, pool *pgxpool.Pool, cond string) (map[[16]byte]*jobRow, int, error) {
	jobs := map[[16]byte]*jobRow{}
	rows, err := pool.Query(ctx, `SELECT id, kind, queue, state::text, runs, failures, part, slot_key, slot_limit, slot_policy,
		journal_moved, journal FROM venturi_job_all WHERE `+cond)
	if err != nil {
		return nil, 0, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var j jobRow
		var journal []byte
		if err := rows.Scan(&id, &j.kind, &j.queue, &j.state, &j.runs, &j.failures, &j.part, &j.slotKey, &j.slotLim, &j.slotPol,
			&j.moved, &journal); err != nil {
			return nil, 0, err
		}
		j.id = id.Bytes
		if err := json.Unmarshal(journal, &j.journal); err != nil {
			return nil, 0, fmt.Errorf("journal of %x: %w", j.id, err)
		}
		jobs[j.id] = &j
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	// Entries moved out of the rows (migration 3) come first in a job's journal.
	rows, err = pool.Query(ctx, `SELECT job_id, entry FROM venturi_journal ORDER BY job_id, seq`)
	if err != nil {
		return nil, 0, err
	}
	moved := map[[16]byte][]venturi.JournalEntry{}
	n := 0
	for rows.Next() {
		var id pgtype.UUID
		var b []byte
		var en venturi.JournalEntry
		if err := rows.Scan(&id, &b); err != nil {
			return nil, 0, err
		}
		if err := json.Unmarshal(b, &en); err != nil {
			return nil, 0, fmt.Errorf("moved journal entry of %x: %w", id.Bytes, err)
		}
		moved[id.Bytes] = append(moved[id.Bytes], en)
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	for id, ms := range moved {
		if j := jobs[id]; j != nil {
			j.journal = append(ms, j.journal...)
		}
	}
	return jobs, n, nil
}

// loadStarts reads chaos_start, by job, in time order.
func loadStarts(ctx context.Context, pool *pgxpool.Pool) (map[[16]byte][]startRow, error) {
	starts := map[[16]byte][]startRow{}
	rows, err := pool.Query(ctx, `SELECT job_id, run, token, worker, pid, at FROM chaos_start ORDER BY at`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var s startRow
		if err := rows.Scan(&id, &s.run, &s.token, &s.worker, &s.pid, &s.at); err != nil {
			return nil, err
		}
		starts[id.Bytes] = append(starts[id.Bytes], s)
	}
	return starts, rows.Err()
}

// loadEffects reads chaos_effect, by job.
func loadEffects(ctx context.Context, pool *pgxpool.Pool) (map[[16]byte][]effectRow, error) {
	effects := map[[16]byte][]effectRow{}
	rows, err := pool.Query(ctx, `SELECT job_id, run, token, outcome, counter, value, at FROM chaos_effect`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var e effectRow
		if err := rows.Scan(&id, &e.run, &e.token, &e.outcome, &e.counter, &e.value, &e.at); err != nil {
			return nil, err
		}
		effects[id.Bytes] = append(effects[id.Bytes], e)
	}
	return effects, rows.Err()
}

// perJobEvidence is what the checks of each job gather for the checks after them.
type perJobEvidence struct {
	cuts, hoCuts []cut          // runs cut by a kill, by a half-open connection
	flowRuns     []flowRun      // the runs of flow-controlled jobs, for the gates
	groupDone    map[string]int // drop and replace bursts: completed jobs
}

// checkEveryJobEnqueued checks invLost from the database's side: every job in it was
// enqueued by the driver.
func (r *report) checkEveryJobEnqueued(d *runRecords) {
	for id, j := range d.jobs {
		if _, ok := d.expects[id]; !ok {
			r.fail(invLost, "job %s (%s, %s) was never enqueued by the driver", ulidStr(id), j.kind, j.state)
		}
	}
}

// checkTerminalState checks invLost (and invDead) for one scripted job: it exists and is
// in its scripted terminal state. It counts the job in its scenario, and returns it (nil
// when it is missing: nothing more of it can be checked).
func (r *report) checkTerminalState(id [16]byte, e expectRow, j *jobRow) *jobRow {
	sc := r.byScenario[e.scenario]
	if sc == nil {
		sc = &scenarioCount{}
		r.byScenario[e.scenario] = sc
	}
	sc.want++
	if j == nil {
		r.fail(invLost, "job %s (%s) is missing", ulidStr(id), e.scenario)
		return nil
	}
	if !stateOK(e.state, j.state) {
		r.fail(invLost, "job %s (%s) is %s, want %s", ulidStr(id), e.scenario, j.state, e.state)
		if stateOK(e.state, "completed") && j.state == "dead" || e.state == "dead" && j.state != "dead" {
			r.fail(invDead, "job %s (%s) is %s, want %s", ulidStr(id), e.scenario, j.state, e.state)
		}
	} else {
		sc.got++
	}
	return j
}

// jobHistory is one job's journal ends and effects, sorted for the checks.
type jobHistory struct {
	id   [16]byte
	job  *jobRow
	ends map[int][]venturi.JournalEntry // the journal's ends, by run
	// completed, dead and paused are the journal's ends of those events.
	completed, dead, paused []venturi.JournalEntry
	effs                    []effectRow // the job's committed effects
	// effCompleted and effPaused are the effects of those outcomes.
	effCompleted, effPaused []effectRow
}

// historyOf sorts a job's journal ends by run and event and its effects by outcome, and
// counts the ended runs into r.runs.
func (r *report) historyOf(id [16]byte, j *jobRow, effs []effectRow) *jobHistory {
	h := &jobHistory{id: id, job: j, ends: map[int][]venturi.JournalEntry{}, effs: effs}
	for _, en := range j.journal {
		if !endEvents[en.Event] {
			continue
		}
		if en.Run == 0 && (en.Event == venturi.EventReplaced || en.Event == venturi.EventCancelled) {
			continue // asked to stop while it waited in a prefetch buffer: no run began
		}
		r.runs++
		h.ends[en.Run] = append(h.ends[en.Run], en)
		switch en.Event {
		case venturi.EventCompleted:
			h.completed = append(h.completed, en)
		case venturi.EventDead:
			h.dead = append(h.dead, en)
		case venturi.EventPaused:
			h.paused = append(h.paused, en)
		}
	}
	for _, ef := range effs {
		switch ef.outcome {
		case "completed":
			h.effCompleted = append(h.effCompleted, ef)
		case "paused":
			h.effPaused = append(h.effPaused, ef)
		}
	}
	return h
}

// completion is the job's completion effect when it completed with exactly one; nil
// otherwise.
func (h *jobHistory) completion() *effectRow {
	if h.job.state == "completed" && len(h.effCompleted) == 1 {
		return &h.effCompleted[0]
	}
	return nil
}

// checkOneEnd checks invOneEnd on the journal: every run 1..runs ends exactly once,
// nothing else ends, and no token ends two runs.
func (r *report) checkOneEnd(h *jobHistory) {
	id, j := h.id, h.job
	terminal := j.state == "completed" || j.state == "dead" || j.state == "cancelled"
	for run, es := range h.ends {
		if len(es) > 1 {
			r.fail(invOneEnd, "job %s run %d has %d ends (%s)", ulidStr(id), run, len(es), events(es))
		}
		if run < 1 || run > j.runs {
			r.fail(invOneEnd, "job %s has an end for run %d but runs = %d", ulidStr(id), run, j.runs)
		}
	}
	if terminal {
		for run := 1; run <= j.runs; run++ {
			if len(h.ends[run]) == 0 {
				r.fail(invOneEnd, "job %s run %d never ended (runs = %d)", ulidStr(id), run, j.runs)
			}
		}
	}
	tokens := map[int64]int{}
	for _, es := range h.ends {
		for _, en := range es {
			tokens[en.Token]++
			if tokens[en.Token] == 2 {
				r.fail(invOneEnd, "job %s: token %d ends two runs", ulidStr(id), en.Token)
			}
		}
	}
}

// checkEffectTokens checks invStale on the effects: every committed effect belongs to a
// run that ended with that outcome under that token.
func (r *report) checkEffectTokens(h *jobHistory) {
	for _, ef := range h.effs {
		ok := false
		for _, en := range h.ends[ef.run] {
			if en.Token == ef.token && string(en.Event) == ef.outcome {
				ok = true
			}
		}
		if !ok {
			r.fail(invStale, "job %s: effect %s of run %d token %d has no matching journal end (%s)",
				ulidStr(h.id), ef.outcome, ef.run, ef.token, events(h.ends[ef.run]))
		}
	}
}

// checkCompletedOnce checks invOnce: a completed job completed once in the journal and
// once in the effects, under the same token (invStale), and a cancelled or dead job not
// at all. A dead job died once, as scripted (invDead): a permanent failure with its note,
// an undecodable payload before its handler.
func (r *report) checkCompletedOnce(h *jobHistory, e expectRow, starts []startRow) {
	id, j := h.id, h.job
	completed, effCompleted, dead := h.completed, h.effCompleted, h.dead
	switch j.state {
	case "completed":
		if len(completed) != 1 {
			r.fail(invOnce, "job %s has %d completed journal entries", ulidStr(id), len(completed))
		}
		if e.scenario == scChunk {
			break // a chunk item left unset completes with no effect: chunkcheck.go counts them
		}
		if len(effCompleted) != 1 {
			r.fail(invOnce, "job %s has %d committed completion effects", ulidStr(id), len(effCompleted))
		}
		if len(completed) == 1 && len(effCompleted) == 1 && (completed[0].Token != effCompleted[0].token || completed[0].Run != effCompleted[0].run) {
			r.fail(invStale, "job %s: completion effect token %d run %d, journal completed token %d run %d",
				ulidStr(id), effCompleted[0].token, effCompleted[0].run, completed[0].Token, completed[0].Run)
		}
	case "cancelled":
		if len(completed) != 0 || len(effCompleted) != 0 {
			r.fail(invOnce, "cancelled job %s has %d completed entries and %d completion effects", ulidStr(id), len(completed), len(effCompleted))
		}
	case "dead":
		if len(completed) != 0 || len(effCompleted) != 0 {
			r.fail(invOnce, "dead job %s has %d completed entries and %d completion effects", ulidStr(id), len(completed), len(effCompleted))
		}
		if len(dead) != 1 {
			r.fail(invDead, "dead job %s has %d dead entries (%s)", ulidStr(id), len(dead), events(j.journal))
		} else {
			switch e.scenario {
			case scPermanent, scChunk, scWorkflow, scBatch, scSpawned, scCallback:
				if dead[0].Note != permanentNote {
					r.fail(invDead, "permanent job %s died with %q", ulidStr(id), dead[0].Note)
				}
			case scBad:
				if !strings.Contains(dead[0].Note, "decode payload") {
					r.fail(invDead, "undecodable job %s died with %q", ulidStr(id), dead[0].Note)
				}
				if len(starts) > 0 {
					r.fail(invDead, "undecodable job %s reached its handler", ulidStr(id))
				}
			}
		}
	}
}

// checkScriptedResults checks a completed job's result against its scenario's script:
// invCarry (a pause job's counters carried through its pauses), invDedup (a dedup job's
// effect value is the merged sum) and invLost (a transient job completed after its
// scripted failures).
func (r *report) checkScriptedResults(h *jobHistory, e expectRow) {
	ec := h.completion()
	if ec == nil {
		return
	}
	id := h.id
	switch e.scenario {
	case scPause:
		if len(h.paused) != e.pauses || ec.counter != e.pauses {
			r.fail(invCarry, "pause job %s: %d paused entries, completion saw counter %d, scripted %d",
				ulidStr(id), len(h.paused), ec.counter, e.pauses)
		}
		var cs []int
		for _, p := range h.effPaused {
			cs = append(cs, p.counter)
		}
		slices.Sort(cs)
		for i, c := range cs {
			if c != i+1 {
				r.fail(invCarry, "pause job %s: pause effects carry counters %v, want 1..%d", ulidStr(id), cs, e.pauses)
				break
			}
		}
		if len(cs) != e.pauses {
			r.fail(invCarry, "pause job %s: %d pause effects, want %d", ulidStr(id), len(cs), e.pauses)
		}
	case scDedup:
		if ec.value != e.value {
			r.fail(invDedup, "dedup job %s: effect value %d, merged sum %d", ulidStr(id), ec.value, e.value)
		}
	case scSQLMerge:
		if ec.value != e.value {
			r.fail(invDedup, "%s job %s: its run saw %d contributions, the job holds %d", SQLMerge{}.Kind(), ulidStr(id), ec.value, e.value)
		}
	case scTransient:
		if ec.value < e.value {
			r.fail(invLost, "transient job %s completed after %d failures, scripted %d", ulidStr(id), ec.value, e.value)
		}
	}
}

// checkStarts checks the handler starts: each belongs to a run that ended under its
// token (invOneEnd), one per run (invDupStarts). The starts of runs whose claim an
// asynchronous failover lost are counted apart (zombie starts).
func (r *report) checkStarts(h *jobHistory, starts []startRow, lossy *faultRow) {
	id := h.id
	perRun := map[int]int{}
	for _, s := range starts {
		if zombieWrite(s.token, s.at, h.job.journal, lossy) {
			r.zombieStarts++
			continue
		}
		perRun[s.run]++
		if perRun[s.run] == 2 {
			r.fail(invDupStarts, "job %s run %d started twice", ulidStr(id), s.run)
		}
		ok := false
		for _, en := range h.ends[s.run] {
			ok = ok || en.Token == s.token
		}
		if !ok {
			r.fail(invOneEnd, "job %s: start of run %d token %d has no journal end", ulidStr(id), s.run, s.token)
		}
	}
}

// checkDisturbedRuns checks invDupStarts on the disturbed runs: every end that is not the
// script's own outcome was cut by a recorded fault. It counts them by cause, and gathers
// into p the runs cut by a kill or a half-open connection while their handler ran, whose
// recovery is measured later.
func (r *report) checkDisturbedRuns(h *jobHistory, e expectRow, d *runRecords, cfg checkConfig, p *perJobEvidence) {
	id, faults, starts := h.id, d.faults, d.starts[h.id]
	for run, es := range h.ends {
		for _, en := range es {
			scripted := en.Event == venturi.EventCompleted || en.Event == venturi.EventPaused || en.Event == venturi.EventReplaced || en.Event == venturi.EventWaiting ||
				en.Event == venturi.EventDead && en.Note != "" && !strings.HasPrefix(en.Note, "backstop") ||
				en.Event == venturi.EventFailed && en.Note == transientNote ||
				// A workflow member asked to stop by its workflow's cancel (wfcheck.go checks
				// that one was asked for); a chunk item failed by its call's scripted panic.
				en.Event == venturi.EventCancelled && isWfScenario(e.scenario) ||
				en.Event == venturi.EventFailed && e.scenario == scChunk && strings.HasPrefix(en.Note, chunkPanicNote)
			if scripted {
				continue
			}
			started := false
			for _, s := range starts {
				started = started || (s.run == run && s.token == en.Token)
			}
			fi := attribute(en, faults, cfg.lease)
			cause := "UNATTRIBUTED"
			if fi >= 0 {
				cause = faults[fi].kind
			} else if !started {
				// A claim that timed out right after a restart may still have
				// committed (see README.md, "Bugs found"): its runs never start.
				if fi = orphanedClaim(en, faults); fi >= 0 {
					cause = faults[fi].kind + " (orphaned claim)"
				}
			}
			r.disturbed[cause]++
			if started {
				r.dupStarts[cause]++
			}
			if fi < 0 {
				r.unattributed++
				r.fail(invDupStarts, "job %s run %d ended %s (%q) on %s with no fault to explain it",
					ulidStr(id), run, en.Event, trunc(en.Note, 120), en.Worker)
			} else if started && faults[fi].kind == "sigkill" {
				if isFlow(e.scenario) {
					r.killGated++ // its next start waits for its gate: not a recovery time
				} else {
					p.cuts = append(p.cuts, cut{fault: fi, job: id, run: run, rescued: en.At})
				}
			} else if started && faults[fi].kind == "half-open" && !isFlow(e.scenario) {
				p.hoCuts = append(p.hoCuts, cut{fault: fi, job: id, run: run, rescued: en.At})
			}
		}
	}
}

// checkCoordination checks durable coordination: invSteps for the memoized steps of a
// steps job (coordcheck.go), invSignals for the signals of a wait job.
func (r *report) checkCoordination(h *jobHistory, e expectRow, coord *coordEvidence) {
	completion := h.completion()
	switch e.scenario {
	case scSteps:
		r.checkStepJob(h.id, e, h.job, coord, completion)
	case scWait:
		r.checkWaitJob(h.id, h.job, coord, completion)
	}
}

// checkControl checks invControl: a fault-free run has no duplicate starts.
func (r *report) checkControl(cfg checkConfig) {
	dups := 0
	for _, n := range r.dupStarts {
		dups += n
	}
	if cfg.control && dups > 0 {
		r.fail(invControl, "%d duplicate starts in a fault-free run", dups)
	}
}

// measureKillRecovery measures, for each run a kill cut while its handler ran, the time
// from the kill to the job's next start, and (for isolated kills) its breakdown: kill to
// rescue, rescue to claim. checkKillRecovery checks the result.
func (r *report) measureKillRecovery(cuts []cut, d *runRecords, cfg checkConfig) {
	faults, starts, jobs := d.faults, d.starts, d.jobs
	for _, c := range cuts {
		f := faults[c.fault]
		var next time.Time
		for _, s := range starts[c.job] {
			if s.run > c.run && s.at.After(f.at) {
				next = s.at
				break
			}
		}
		if next.IsZero() {
			r.killNoNext++
			continue
		}
		r.killRecoveryAll = append(r.killRecoveryAll, next.Sub(f.at))
		// The p99 bound is checked on isolated kills only.
		if !isolated(c, faults, starts, cfg) {
			r.killCompound++
			continue
		}
		r.killRecovery = append(r.killRecovery, next.Sub(f.at))
		// Breakdown: kill -> rescue (lease expiry + maintenance tick), rescue -> claim of
		// the next run (poll, place in line).
		var claimed time.Time
		for _, en := range jobs[c.job].journal {
			if endEvents[en.Event] && en.Run == c.run+1 {
				claimed = en.StartedAt
			}
		}
		if !c.rescued.IsZero() && !claimed.IsZero() {
			r.killRescue = append(r.killRescue, c.rescued.Sub(f.at))
			r.killClaim = append(r.killClaim, claimed.Sub(c.rescued))
		}
	}
}

// isolated reports whether the run c cut measures its own fault's recovery alone. A cut
// whose recovery window (lease + 2s from its fault) meets another fault measures
// that fault too: a PostgreSQL outage, a terminate burst (the workers' claims back off
// after errors), a stalled worker (a third of the capacity gone) or a half-open cut. The
// same holds when the job's next run was itself cut before its handler started (by the
// next fault). Kills and half-open cuts are attributed by this one rule.
func isolated(c cut, faults []faultRow, starts map[[16]byte][]startRow, cfg checkConfig) bool {
	f := faults[c.fault]
	window := f.at.Add(cfg.lease + 2*time.Second)
	for i, o := range faults {
		if i == c.fault {
			continue
		}
		ext := time.Duration(0)
		switch {
		case backFromOutage(o.kind):
			ext = 5 * time.Second
		case o.kind == "terminate-burst":
			ext = 3 * time.Second
		case o.kind == "sigstop":
			ext = time.Second
		case o.kind == "half-open":
			ext = cfg.lease + time.Second
		case o.kind == "pgbouncer-restart":
			ext = 2 * time.Second
		default:
			continue
		}
		if !o.at.After(window) && !o.until.Add(ext).Before(f.at) {
			return false
		}
	}
	for _, s := range starts[c.job] {
		if s.run == c.run+1 {
			return true
		}
	}
	return false
}

// checkKillRecovery checks invKillRec on what measureKillRecovery measured: in a faulty
// run, the p99 of isolated kill -> next start is at most lease + 2s.
func (r *report) checkKillRecovery(cfg checkConfig) {
	slices.Sort(r.killRecoveryAll)
	slices.Sort(r.killRecovery)
	slices.Sort(r.killRescue)
	slices.Sort(r.killClaim)
	if !cfg.control && len(r.killRecovery) > 0 {
		if p99 := pct(r.killRecovery, 99); p99 > cfg.lease+2*time.Second {
			r.fail(invKillRec, "p99 %v > %v", p99.Round(time.Millisecond), cfg.lease+2*time.Second)
		}
	}
}

// checkPGRecovery checks invPGRec: claiming resumes at most 10s after PostgreSQL is back
// from each outage (restart, promotion, disk freed). It describes each recovery for the
// report.
func (r *report) checkPGRecovery(d *runRecords) {
	for _, f := range d.faults {
		if !backFromOutage(f.kind) {
			continue
		}
		var first time.Time
		for _, j := range d.jobs {
			for _, en := range j.journal {
				if endEvents[en.Event] && en.StartedAt.After(f.until) && (first.IsZero() || en.StartedAt.Before(first)) {
					first = en.StartedAt
				}
			}
		}
		if first.IsZero() {
			r.pgRecovery = append(r.pgRecovery, fmt.Sprintf("%s at %s: down %v, no claim afterwards (no work left)",
				f.kind, f.at.Format("15:04:05"), f.until.Sub(f.at).Round(time.Millisecond)))
			continue
		}
		sinceBack := first.Sub(f.until)
		r.pgWorst = max(r.pgWorst, sinceBack)
		var firstStart time.Time // the first handler that began after it (a start row)
		for _, ss := range d.starts {
			for _, s := range ss {
				if s.at.After(f.until) && (firstStart.IsZero() || s.at.Before(firstStart)) {
					firstStart = s.at
				}
			}
		}
		handler := ""
		if !firstStart.IsZero() {
			handler = fmt.Sprintf(", first handler start %v", firstStart.Sub(f.until).Round(time.Millisecond))
		}
		r.pgRecovery = append(r.pgRecovery, fmt.Sprintf("%s at %s: down %v, first claim %v%s after it was back%s",
			f.kind, f.at.Format("15:04:05"), f.until.Sub(f.at).Round(time.Millisecond), sinceBack.Round(time.Millisecond), handler,
			map[bool]string{true: " (promoted)", false: ""}[strings.HasPrefix(f.kind, "failover")]))
		if sinceBack > 10*time.Second {
			r.fail(invPGRec, "%s at %s: first claim %v after PostgreSQL was back", f.kind, f.at.Format("15:04:05"), sinceBack.Round(time.Millisecond))
		}
	}
}

// checkLedgerRecords checks invLedger and invLedgerOnce: the completion ledger the
// workers wrote (ledger.go) against the committed effects.
func (r *report) checkLedgerRecords(cfg checkConfig, d *runRecords) {
	st, violations := checkLedger(cfg.ledger, d.effects, d.lossy != nil)
	st.torn = cfg.ledgerTorn
	r.ledger = st.String()
	r.require(invLedger, violations)
	r.require(invLedgerOnce, violations)
}

// require adds an invariant and fails it once for each of the violations that name it
// (each reads "<invariant>: <what>").
func (r *report) require(name string, violations []string) {
	r.invariants = append(r.invariants, invariant{name: name})
	for _, v := range violations {
		if rest, ok := strings.CutPrefix(v, name+": "); ok {
			r.fail(name, "%s", rest)
		}
	}
}

// prefixed names the invariant that each of xs violates.
func prefixed(name string, xs []string) []string {
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		out = append(out, name+": "+x)
	}
	return out
}

// backFromOutage says whether a fault takes the database away and gives it back: claiming
// must resume within 10s of its end (a restart's return, a promotion, a freed disk).
func backFromOutage(kind string) bool {
	return strings.HasPrefix(kind, "pg-restart") || strings.HasPrefix(kind, "failover") || kind == "wal-full"
}

// lossyFailover is the asynchronous failover among the faults, if any.
func lossyFailover(faults []faultRow) *faultRow {
	for i := range faults {
		if faults[i].kind == "failover-async" {
			return &faults[i]
		}
	}
	return nil
}

// zombieWrite says whether a row (a start row, a step's execution row) was written by a
// run whose claim an asynchronous failover lost: the job's journal has no run under its
// token (the new primary never heard of that claim), and it was written after the
// primary died (before, its claim would have been in the same lost history, and the row
// with it). Such a run's fenced writes all fail; its unfenced writes land.
func zombieWrite(token int64, at time.Time, journal []venturi.JournalEntry, lossy *faultRow) bool {
	if lossy == nil || at.Before(lossy.at) {
		return false
	}
	for _, en := range journal {
		if en.Token == token {
			return false
		}
	}
	return true
}

// attribute finds the recorded fault that explains a run's disturbed end: a kill or stop
// of the process that ran it while it ran, a PostgreSQL restart or a terminate burst that
// overlapped it. A run that failed because its connection had been terminated (SQLSTATE
// 57P01 in its note) is explained by the latest terminate burst or restart that began
// before it ended, however long before: a connection terminated while it sat idle in a
// pool reports it only when it is next used. It returns the fault's index, or -1.
func attribute(en venturi.JournalEntry, faults []faultRow, lease time.Duration) int {
	const slack = 500 * time.Millisecond
	pid := pidOf(en.Worker)
	from, to := en.StartedAt.Add(-slack), en.At.Add(slack)
	terminated := strings.Contains(en.Note, "(SQLSTATE 57P01)")
	if terminated {
		from = time.Time{} // the termination may have come long before the run used the connection
	}
	overlaps := func(a, b time.Time) bool { return !a.After(to) && !b.Before(from) }
	best := -1
	rank := map[string]int{"sigkill": 1, "upgrade": 1, "sigstop": 2, "half-open": 2, "pg-restart-immediate": 3, "pg-restart-fast": 3,
		"failover-sync": 3, "failover-async": 3, "wal-full": 3, "migrate": 3, "pgbouncer-restart": 4, "terminate-burst": 4}
	for i, f := range faults {
		if terminated && f.kind != "terminate-burst" && !strings.HasPrefix(f.kind, "pg-restart") {
			continue // only these terminate connections
		}
		ok := false
		switch f.kind {
		case "sigkill":
			ok = f.pid == pid && overlaps(f.at, f.at)
		case "sigstop":
			ok = f.pid == pid && overlaps(f.at, f.until)
		case "upgrade":
			// A rolling deploy's stop of an older worker (SIGTERM, rolling.go): what it
			// did not finish in its stop timeout is rescued.
			ok = f.pid == pid && overlaps(f.at, f.until.Add(2*time.Second))
		case "migrate":
			// A migration's table locks hold every worker's statements up, lease
			// extensions too, until it commits.
			ok = overlaps(f.at, f.until.Add(2*time.Second))
		case "pg-restart-immediate", "pg-restart-fast":
			// After the restart, runs claimed before it lose their leases: their handlers
			// stop (self-fencing) and are rescued one lease after the server is back.
			ok = overlaps(f.at, f.until.Add(2*time.Second))
		case "terminate-burst":
			ok = overlaps(f.at, f.until.Add(time.Second))
		case "half-open":
			// Only the process that was cut off: its runs are rescued a lease after the
			// cut, or end when the held data arrives after the heal.
			ok = f.pid == pid && overlaps(f.at, f.until.Add(2*time.Second))
		case "pgbouncer-restart":
			// Only the workers behind PgBouncer (the fault names each one's slot).
			ok = f.worker == slotOf(en.Worker) && overlaps(f.at, f.until.Add(2*time.Second))
		case "failover-sync", "failover-async", "wal-full":
			// The database is gone from the kill (or the disk filling) until the
			// promotion (or its return): as for a restart.
			ok = overlaps(f.at, f.until.Add(2*time.Second))
		}
		// Of equally ranked faults, the latest to begin is the one that ended the run: a
		// run claimed just after one half-open cut healed and ended by the next cut of the
		// same worker overlaps both windows, and its recovery counts from the second.
		switch {
		case !ok:
		case terminated: // the latest termination before the run's end
			if best < 0 || f.at.After(faults[best].at) {
				best = i
			}
		case best < 0 || rank[f.kind] < rank[faults[best].kind] ||
			rank[f.kind] == rank[faults[best].kind] && f.at.After(faults[best].at):
			best = i
		}
	}
	return best
}

// orphanedClaim explains an abandoned run whose handler never started, claimed up to 5s
// after PostgreSQL came back from a restart: claims are slow then (every backend
// reconnects cold), and a claim that outlives the worker's timeout can commit without the
// worker knowing (an open venturi bug, README.md "Bugs found"). It returns the restart's
// index, or -1.
func orphanedClaim(en venturi.JournalEntry, faults []faultRow) int {
	if en.Event != venturi.EventAbandoned {
		return -1
	}
	for i, f := range faults {
		if strings.HasPrefix(f.kind, "pg-restart") && !en.StartedAt.Before(f.at) && !en.StartedAt.After(f.until.Add(5*time.Second)) {
			return i
		}
	}
	return -1
}

// slotOf is N of a worker ID chaos-worker-N-pidP, or 0.
func slotOf(worker string) int {
	var n int
	if _, err := fmt.Sscanf(strings.TrimPrefix(worker, "chaos-worker-"), "%d-pid", &n); err != nil {
		return 0
	}
	return n
}

func pidOf(worker string) int {
	i := strings.LastIndex(worker, "-pid")
	if i < 0 {
		return 0
	}
	var pid int
	fmt.Sscan(worker[i+4:], &pid)
	return pid
}

func ulidStr(id [16]byte) string { return ulid.ULID(id).String() }

func events(es []venturi.JournalEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, fmt.Sprintf("%s#%d/%d", e.Event, e.Run, e.Token))
	}
	return strings.Join(s, ",")
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func (r *report) print(w io.Writer, mode string, seed uint64, elapsed time.Duration, spawns int) {
	line := strings.Repeat("-", 72)
	fmt.Fprintf(w, "\n%s\nventuri chaos summary: profile %s, seed %d, %v after workers started\n%s\n", line, mode, seed, elapsed.Round(time.Second), line)
	fmt.Fprintf(w, "faults injected\n")
	kinds := []string{"sigkill", "sigstop", "pg-restart-immediate", "pg-restart-fast", "terminate-burst", "listen-kill", "half-open", "pgbouncer-restart"}
	for _, k := range []string{"failover-sync", "failover-async", "wal-full", "long-transaction", "migrate", "upgrade"} {
		if r.faults[k] > 0 { // the faults of their own modes
			kinds = append(kinds, k)
		}
	}
	total := 0
	for _, k := range kinds {
		fmt.Fprintf(w, "  %-24s %6d\n", k, r.faults[k])
		total += r.faults[k]
	}
	fmt.Fprintf(w, "  %-24s %6d   (worker processes started: %d)\n", "total", total, spawns)
	for _, d := range r.faultDetail {
		fmt.Fprintf(w, "    %s\n", d)
	}
	fmt.Fprintf(w, "jobs (scripted terminal state reached / enqueued)\n")
	var scs []string
	for s := range r.byScenario {
		scs = append(scs, s)
	}
	sort.Strings(scs)
	got := 0
	for _, s := range scs {
		c := r.byScenario[s]
		fmt.Fprintf(w, "  %-24s %6d / %d\n", s, c.got, c.want)
		got += c.got
	}
	fmt.Fprintf(w, "  %-24s %6d / %d\n", "total", got, r.jobs)
	fmt.Fprintf(w, "  %-24s %6d\n", "lost", r.jobs-got)
	fmt.Fprintf(w, "runs: %d ended, %d handler starts (journal entries read from venturi_journal: %d)\n", r.runs, r.starts, r.journalMoved)
	fmt.Fprintln(w, r.singleton)
	fmt.Fprintln(w, r.cron)
	fmt.Fprintln(w, r.events)
	if r.ledger != "" {
		fmt.Fprintln(w, r.ledger)
	}
	if r.zombieStarts+r.coord.zombieSteps > 0 {
		fmt.Fprintf(w, "zombie runs: %d handler starts and %d step executions written on the new primary by runs whose claim the failover lost (their fenced writes all failed)\n",
			r.zombieStarts, r.coord.zombieSteps)
	}
	r.printFlow(w)
	r.printCoord(w)
	r.printWorkflows(w)
	fmt.Fprintf(w, "duplicate starts (handler started, run cut) / disturbed runs (incl. cut before start), by cause\n")
	causes := map[string]bool{}
	for c := range r.disturbed {
		causes[c] = true
	}
	var cs []string
	for c := range causes {
		cs = append(cs, c)
	}
	sort.Strings(cs)
	dt, rt := 0, 0
	for _, c := range cs {
		fmt.Fprintf(w, "  %-38s %6d / %d\n", c, r.dupStarts[c], r.disturbed[c])
		dt += r.dupStarts[c]
		rt += r.disturbed[c]
	}
	fmt.Fprintf(w, "  %-38s %6d / %d\n", "total", dt, rt)
	fmt.Fprintf(w, "recovery\n")
	if len(r.killRecovery) > 0 {
		k := r.killRecovery
		fmt.Fprintf(w, "  isolated kill -> next start of a job the killed worker ran (n=%d, bound %v)\n", len(k), r.lease+2*time.Second)
		fmt.Fprintf(w, "    p50 %v  p90 %v  p99 %v  max %v\n", pct(k, 50).Round(time.Millisecond), pct(k, 90).Round(time.Millisecond),
			pct(k, 99).Round(time.Millisecond), k[len(k)-1].Round(time.Millisecond))
		for _, b := range []struct {
			name string
			d    []time.Duration
		}{{"kill -> rescued", r.killRescue}, {"rescued -> claimed", r.killClaim}} {
			if len(b.d) > 0 {
				fmt.Fprintf(w, "    %-20s p50 %v  p90 %v  p99 %v  max %v\n", b.name, pct(b.d, 50).Round(time.Millisecond),
					pct(b.d, 90).Round(time.Millisecond), pct(b.d, 99).Round(time.Millisecond), b.d[len(b.d)-1].Round(time.Millisecond))
			}
		}
	} else {
		fmt.Fprintf(w, "  kill -> next start: no samples\n")
	}
	if len(r.killRecoveryAll) > 0 {
		k := r.killRecoveryAll
		fmt.Fprintf(w, "  all kills, compound faults included (n=%d, for information)\n", len(k))
		fmt.Fprintf(w, "    p50 %v  p90 %v  p99 %v  max %v\n", pct(k, 50).Round(time.Millisecond), pct(k, 90).Round(time.Millisecond),
			pct(k, 99).Round(time.Millisecond), k[len(k)-1].Round(time.Millisecond))
		fmt.Fprintf(w, "    (%d samples next to another fault or re-cut before their next start; %d cut runs with no later start)\n",
			r.killCompound, r.killNoNext)
	}
	if r.killGated > 0 {
		fmt.Fprintf(w, "  (%d cut runs of flow-controlled jobs left out: their next start waits for their gate)\n", r.killGated)
	}
	r.printHalfOpen(w)
	for _, s := range r.pgRecovery {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprint(w, r.extra)
	fmt.Fprintf(w, "invariants\n")
	for _, inv := range r.invariants {
		st := "ok"
		if inv.bad > 0 {
			st = fmt.Sprintf("VIOLATED (%d)", inv.bad)
		}
		fmt.Fprintf(w, "  %-58s %s\n", inv.name, st)
	}
	if len(r.violations) > 0 {
		fmt.Fprintf(w, "violations (%d):\n", len(r.violations))
		for i, v := range r.violations {
			if i == 40 {
				fmt.Fprintf(w, "  … %d more\n", len(r.violations)-40)
				break
			}
			fmt.Fprintf(w, "  %s\n", v)
		}
		fmt.Fprintf(w, "RESULT: FAIL\n")
	} else {
		fmt.Fprintf(w, "RESULT: PASS\n")
	}
}
