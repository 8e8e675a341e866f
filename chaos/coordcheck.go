package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// Durable coordination, checked from the database: memoized steps (venturi_step and the
// steps' own rows) and signals (venturi_signal and the signals the completions read).
//
// Steps. A step's body writes an execution row in its own autocommit statement, then its
// effect row in the step's transaction, which also writes venturi's memo (StepTx): the
// effect commits with the memo or not at all, and every execution is on record whether
// or not its transaction committed. The memo names the run that wrote it. A run claimed
// after that run cannot start before the memo committed (the memo is fenced by the
// writer's token), so it must read the memo and not execute the step: an execution row of
// a later run is a step that ran again after its memo committed.
//
// Signals. Every send of a wait job's signal uses one delivery ID, so the job holds one
// signal. A run that reads it consumes it when its end is written; the run that completes
// the job records what it read in its completion's transaction.

// stepMemo is a venturi_step row.
type stepMemo struct {
	step   string
	run    int
	token  int64
	result string // JSON: the token of the run that executed the step
}

// stepRow is a chaos_step_exec or chaos_step_effect row.
type stepRow struct {
	step  string
	run   int
	token int64
	at    time.Time
}

// signalRow is a venturi_signal row.
type signalRow struct {
	seq      int64
	delivery string
	consumed *int64 // the token of the run that consumed it
}

// sigRead is a chaos_sigread row: a signal a completing run read.
type sigRead struct {
	run   int
	token int64
	seq   int64
}

// coordEvidence is what the coordination checks read, by job.
type coordEvidence struct {
	memos   map[[16]byte][]stepMemo
	execs   map[[16]byte][]stepRow
	effects map[[16]byte][]stepRow
	signals map[[16]byte][]signalRow
	reads   map[[16]byte][]sigRead
}

// coordStats summarizes the coordination scenarios for the report.
type coordStats struct {
	stepJobs       int
	memos          int // steps memoized
	skipped        int // memoized steps a later run of the job read instead of running them
	cutAfterMemo   int // runs cut after at least one memo committed, before completing
	reExecuted     int // step bodies run again because their first execution did not commit
	waitJobs       int
	signals        int
	consumedByEnd  int // signals consumed by the run that completed the job
	consumedByCut  int // signals consumed by another run (it read them, then failed)
	completedEmpty int // wait jobs that completed after reading no signal (their wait timed out)
	zombieSteps    int // executions by runs whose claim an asynchronous failover lost
}

const (
	invSteps   = "no memoized step ran twice after its memo committed"
	invSignals = "each signal consumed by exactly one run, delivered once"
)

func loadCoord(ctx context.Context, pool *pgxpool.Pool) (*coordEvidence, error) {
	ev := &coordEvidence{memos: map[[16]byte][]stepMemo{}, execs: map[[16]byte][]stepRow{}, effects: map[[16]byte][]stepRow{},
		signals: map[[16]byte][]signalRow{}, reads: map[[16]byte][]sigRead{}}
	rows, err := pool.Query(ctx, `SELECT job_id, name, run, token, result::text FROM venturi_step`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var m stepMemo
		if err := rows.Scan(&id, &m.step, &m.run, &m.token, &m.result); err != nil {
			return nil, err
		}
		ev.memos[id.Bytes] = append(ev.memos[id.Bytes], m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, t := range []struct {
		table string
		into  map[[16]byte][]stepRow
	}{{"chaos_step_exec", ev.execs}, {"chaos_step_effect", ev.effects}} {
		rows, err := pool.Query(ctx, `SELECT job_id, step, run, token, at FROM `+t.table)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id pgtype.UUID
			var s stepRow
			if err := rows.Scan(&id, &s.step, &s.run, &s.token, &s.at); err != nil {
				return nil, err
			}
			t.into[id.Bytes] = append(t.into[id.Bytes], s)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	rows, err = pool.Query(ctx, `SELECT job_id, seq, delivery_id, consumed_token FROM venturi_signal ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var s signalRow
		if err := rows.Scan(&id, &s.seq, &s.delivery, &s.consumed); err != nil {
			return nil, err
		}
		ev.signals[id.Bytes] = append(ev.signals[id.Bytes], s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `SELECT job_id, run, token, seq FROM chaos_sigread`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id pgtype.UUID
		var s sigRead
		if err := rows.Scan(&id, &s.run, &s.token, &s.seq); err != nil {
			return nil, err
		}
		ev.reads[id.Bytes] = append(ev.reads[id.Bytes], s)
	}
	return ev, rows.Err()
}

// checkStepJob holds a steps job to its memos: at most one execution of a step by the run
// that memoized it and none by a later run, one committed effect per memo (the memo's run
// and token), no effect without a memo, every memo written by a run of the job under its
// token, and for a completed job all its steps memoized and read back by the completion
// (its value is the sum of the memoized results).
func (r *report) checkStepJob(id [16]byte, e expectRow, j *jobRow, ev *coordEvidence, completion *effectRow) {
	r.coord.stepJobs++
	memos := map[string]stepMemo{}
	for _, m := range ev.memos[id] {
		memos[m.step] = m
		r.coord.memos++
	}
	ends := map[int][]venturi.JournalEntry{}
	for _, en := range j.journal {
		if endEvents[en.Event] {
			ends[en.Run] = append(ends[en.Run], en)
		}
	}
	completedRun := 0
	if completion != nil {
		completedRun = completion.run
	}
	cut := map[int]bool{} // runs that memoized a step and did not complete the job
	for name, m := range memos {
		ok := false
		for _, en := range ends[m.run] {
			ok = ok || en.Token == m.token
		}
		if !ok {
			r.fail(invSteps, "job %s: memo %s written by run %d token %d, which has no journal end under that token (%s)",
				ulidStr(id), name, m.run, m.token, events(ends[m.run]))
		}
		if m.result != strconv.FormatInt(m.token, 10) {
			r.fail(invSteps, "job %s: memo %s holds %s, but run %d's token is %d", ulidStr(id), name, m.result, m.run, m.token)
		}
		if completedRun > m.run {
			r.coord.skipped++
		}
		if m.run != completedRun {
			cut[m.run] = true
		}
	}
	r.coord.cutAfterMemo += len(cut)
	byRun := map[string]int{}
	for _, x := range ev.execs[id] {
		if zombieWrite(x.token, x.at, j.journal, r.lossy) {
			r.coord.zombieSteps++ // a run whose claim an asynchronous failover lost (check.go)
			continue
		}
		m, ok := memos[x.step]
		switch {
		case !ok:
			continue // never memoized: every execution was cut before its commit
		case x.run > m.run:
			r.fail(invSteps, "job %s: %s ran in run %d (token %d) after run %d memoized it", ulidStr(id), x.step, x.run, x.token, m.run)
		case x.run == m.run && x.token == m.token:
			if byRun[x.step]++; byRun[x.step] == 2 {
				r.fail(invSteps, "job %s: %s ran twice in run %d", ulidStr(id), x.step, x.run)
			}
		default:
			r.coord.reExecuted++ // an earlier run's execution that did not commit
		}
	}
	perStep := map[string]int{}
	for _, f := range ev.effects[id] {
		m, ok := memos[f.step]
		if !ok {
			r.fail(invSteps, "job %s: the effect of %s (run %d) committed without its memo", ulidStr(id), f.step, f.run)
			continue
		}
		if f.run != m.run || f.token != m.token {
			r.fail(invSteps, "job %s: an effect of %s committed by run %d token %d, memo by run %d token %d",
				ulidStr(id), f.step, f.run, f.token, m.run, m.token)
		}
		if perStep[f.step]++; perStep[f.step] == 2 {
			r.fail(invSteps, "job %s: %s's effect committed twice", ulidStr(id), f.step)
		}
	}
	if j.state != "completed" || completion == nil {
		return
	}
	var sum int64
	for i := 1; i <= e.steps; i++ {
		m, ok := memos[stepName(i)]
		if !ok {
			r.fail(invSteps, "completed job %s has no memo of %s", ulidStr(id), stepName(i))
			continue
		}
		if perStep[m.step] != 1 {
			r.fail(invSteps, "completed job %s: %d committed effects of %s", ulidStr(id), perStep[m.step], m.step)
		}
		sum += m.token
	}
	if len(memos) != e.steps || completion.counter != e.steps {
		r.fail(invSteps, "completed job %s: %d memos, completion counted %d steps, scripted %d", ulidStr(id), len(memos), completion.counter, e.steps)
	}
	if completion.value != sum {
		r.fail(invSteps, "completed job %s: the completion summed %d, the memos hold %d: a step result was not read back", ulidStr(id), completion.value, sum)
	}
}

// checkWaitJob holds a wait job to its signals: one signal (every send shares a delivery
// ID), consumed when the job completed, by a run whose end a worker wrote (an abandoned
// run consumes nothing); each signal read by the completing run is consumed by that run
// and read once; the completion counted what it read.
func (r *report) checkWaitJob(id [16]byte, j *jobRow, ev *coordEvidence, completion *effectRow) {
	r.coord.waitJobs++
	sigs := ev.signals[id]
	r.coord.signals += len(sigs)
	if len(sigs) > 1 {
		r.fail(invSignals, "job %s holds %d signals; every send used one delivery ID", ulidStr(id), len(sigs))
	}
	waited := false
	for _, en := range j.journal {
		waited = waited || en.Event == venturi.EventWaiting
	}
	if !waited && j.state == "completed" {
		r.fail(invSignals, "completed wait job %s never waited (%s)", ulidStr(id), events(j.journal))
	}
	ends := map[int64]venturi.JournalEntry{}
	for _, en := range j.journal {
		if endEvents[en.Event] {
			ends[en.Token] = en
		}
	}
	bySeq := map[int64]signalRow{}
	for _, s := range sigs {
		bySeq[s.seq] = s
		if s.consumed == nil {
			if j.state == "completed" {
				r.fail(invSignals, "completed job %s left signal %d unconsumed", ulidStr(id), s.seq)
			}
			continue
		}
		en, ok := ends[*s.consumed]
		switch {
		case !ok:
			r.fail(invSignals, "job %s: signal %d consumed by token %d, which ended no run", ulidStr(id), s.seq, *s.consumed)
		case en.Event == venturi.EventAbandoned:
			r.fail(invSignals, "job %s: signal %d consumed by run %d, which was abandoned (its reads must stay unconsumed)", ulidStr(id), s.seq, en.Run)
		case completion != nil && *s.consumed == completion.token:
			r.coord.consumedByEnd++
		default:
			r.coord.consumedByCut++
		}
	}
	read := map[int64]int{}
	for _, x := range ev.reads[id] {
		if read[x.seq]++; read[x.seq] == 2 {
			r.fail(invSignals, "job %s: signal %d read by two committed runs", ulidStr(id), x.seq)
		}
		s, ok := bySeq[x.seq]
		switch {
		case !ok:
			r.fail(invSignals, "job %s: run %d read signal %d, which does not exist", ulidStr(id), x.run, x.seq)
		case s.consumed == nil || *s.consumed != x.token:
			r.fail(invSignals, "job %s: run %d (token %d) read signal %d, consumed by %v", ulidStr(id), x.run, x.token, x.seq, fmtToken(s.consumed))
		}
		if completion == nil || x.token != completion.token {
			r.fail(invSignals, "job %s: a read of signal %d committed by run %d, which did not complete the job", ulidStr(id), x.seq, x.run)
		}
	}
	if completion != nil {
		if completion.counter != len(ev.reads[id]) {
			r.fail(invSignals, "job %s: the completion read %d signals, %d reads recorded", ulidStr(id), completion.counter, len(ev.reads[id]))
		}
		if completion.counter == 0 {
			r.coord.completedEmpty++
		}
	}
}

func fmtToken(t *int64) string {
	if t == nil {
		return "no run"
	}
	return fmt.Sprintf("token %d", *t)
}

// printCoord writes the coordination lines of the summary.
func (r *report) printCoord(w io.Writer) {
	c := r.coord
	if c.stepJobs == 0 && c.waitJobs == 0 {
		return
	}
	fmt.Fprintf(w, "coordination\n")
	fmt.Fprintf(w, "  steps: %d jobs, %d steps memoized; %d runs cut after a memo committed, %d memoized steps read back by a later run instead of running again; %d step bodies re-run after a cut before their commit\n",
		c.stepJobs, c.memos, c.cutAfterMemo, c.skipped, c.reExecuted)
	fmt.Fprintf(w, "  wait: %d jobs, %d signals (one delivery ID per job, sent up to twice a round); consumed by the completing run %d, by an earlier run that then failed %d; completions that read nothing (timed out) %d\n",
		c.waitJobs, c.signals, c.consumedByEnd, c.consumedByCut, c.completedEmpty)
}
