package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Scenarios scripted by payload. The driver records the expected terminal state of
// every job in chaos_expect; the worker only follows the script.
const (
	scOK        = "ok"        // completes on its first undisturbed run
	scTransient = "transient" // fails (retryably) until Failures() reaches Fails, then completes
	scPermanent = "permanent" // returns venturi.Permanent: dead
	scPause     = "pause"     // pauses Pauses times, carrying a counter, then completes
	scBad       = "bad"       // payload does not decode into Job: dead without running
	scDedup     = "dedup"     // a ChaosDedup job; its effect value is the merged sum

	// Flow-controlled scenarios (see flowcheck.go). They are enqueued in bursts of one
	// gate, all due in one wave, so that their limits bind.
	scSlot    = "slot"    // a Slotted job (SlotQueue) of one of slotKeys: completes
	scDrop    = "drop"    // a Slotted job (SlotDropIfRunning): completes, or is dropped (cancelled)
	scReplace = "replace" // a Slotted job (SlotReplace): completes, or is replaced (cancelled)
	scCapped  = "capped"  // a Capped job: at most cappedConcurrency run at once; completes
	scRated   = "rated"   // a Rated job: at most ratedN starts per ratedPer per partition; completes
	scQueued  = "queued"  // a Queued job, in limitedQueue: at most limitedQueueConcurrency run at once

	// Durable coordination (see coordcheck.go).
	scSteps = "steps" // a Stepped job: memoized steps (StepTx) with work between them; completes
	scWait  = "wait"  // a Waiter job: waits for the signal the driver sends, reads it, completes

	// Enqueued from SQL and Go alike while the workload runs (sqlproducer.go).
	scSQLMerge   = "sql-merge"   // a SQLMerge job: its effect value is the number of contributions merged into it
	scSQLReplace = "sql-replace" // a SQLReplace job: completes
)

// The wait scenario's signal and timeout. The driver sends waitSignal to every waiting
// Waiter job (twice, with one delivery ID), and to some before their first run.
const (
	waitSignal  = "go"
	waitTimeout = 20 * time.Second
)

// The flow-control limits of the workload: the scripted kinds declare them, the driver
// sets the queue's, and the checker holds the journals to them.
const (
	cappedConcurrency       = 3 // Capped's Limits.Concurrency, below the 3 x 8 handlers
	ratedN                  = 5 // Rated's Limits.Rate: ratedN starts per ratedPer, per partition
	ratedPer                = 500 * time.Millisecond
	limitedQueue            = "chaos-limited" // Queued's queue
	limitedQueueConcurrency = 2               // set by the driver with SetQueueConcurrency
	limitedQueueHandlers    = 3               // each worker's handlers for limitedQueue
)

// slotKeys are the shared keys of the slot scenario, with their limits (SlotQueue).
var slotKeys = []struct {
	key   string
	limit int
}{{"slot-1a", 1}, {"slot-1b", 1}, {"slot-2a", 2}, {"slot-2b", 2}}

// ratedParts and cappedParts are the partitions of the Rated and Capped jobs.
var (
	ratedParts  = []string{"tenant-a", "tenant-b", "tenant-c"}
	cappedParts = []string{"cap-a", "cap-b"}
)

// Job is the main chaos task. Its outcome is scripted by its payload.
type Job struct {
	Seq      int64  `json:"seq"`
	Scenario string `json:"sc"`
	Fails    int    `json:"fails,omitempty"`
	Pauses   int    `json:"pauses,omitempty"`
	WorkMs   int    `json:"work_ms"`
}

func (Job) Kind() string { return "chaos" }

// StreamEvents opts a third of the jobs in to the durable event stream (eventcheck.go).
func (j Job) StreamEvents() bool { return j.Seq%3 == 0 }

// badJob has Job's kind but a payload whose "seq" is a string: it cannot decode into
// Job, so the worker must send it to dead without calling the handler.
type badJob struct {
	Seq      string `json:"seq"`
	Scenario string `json:"sc"`
}

func (badJob) Kind() string { return "chaos" }

// Carry is the pause counter carried between the runs of one job.
type Carry struct {
	N int `json:"n"`
}

// Dedup is enqueued in groups sharing a dedup key. A collision merges With the
// pending job, summing Adds, unless the incoming task asks to be Independent.
type Dedup struct {
	Key    string `json:"key"`
	Adds   int    `json:"adds"`
	Indep  bool   `json:"indep,omitempty"`
	WorkMs int    `json:"work_ms"`
}

func (Dedup) Kind() string                 { return "chaos.dedup" }
func (Dedup) StreamEvents() bool           { return true } // merges in the event stream
func (d Dedup) DedupKey() venturi.DedupKey { return venturi.DedupKey(d.Key) }
func (d Dedup) Merge(existing venturi.Pending[Dedup, struct{}]) venturi.Merge[Dedup, struct{}] {
	if d.Indep {
		return existing.Independent()
	}
	return existing.With(Dedup{Key: d.Key, Adds: existing.Payload.Adds + d.Adds, WorkMs: existing.Payload.WorkMs}, existing.Carry)
}

// SQLMerge is enqueued by the SQL producer (sqlproducer.go), through venturi_enqueue,
// venturi_enqueue_many and Enqueue, on a few shared keys. Its merge is Go code, so an
// enqueue from SQL that meets a pending job of its key waits in venturi_deferred_merge for a
// worker: the merge appends the incoming contributions to the pending job's, so the job
// that runs lists every enqueue merged into it.
type SQLMerge struct {
	Key     string   `json:"key"`
	Contrib []string `json:"contrib"`
	WorkMs  int      `json:"work_ms"`
}

// Kind returns the SQL producer's Go-merged kind.
func (SQLMerge) Kind() string { return "chaos.sqlmerge" }

// DedupKey returns the job's key.
func (m SQLMerge) DedupKey() venturi.DedupKey { return venturi.DedupKey(m.Key) }

// Merge appends the incoming contributions to the pending job's.
func (m SQLMerge) Merge(existing venturi.Pending[SQLMerge, struct{}]) venturi.Merge[SQLMerge, struct{}] {
	c := append(slices.Clone(existing.Payload.Contrib), m.Contrib...)
	return existing.With(SQLMerge{Key: m.Key, Contrib: c, WorkMs: existing.Payload.WorkMs}, existing.Carry)
}

// Handle runs a SQLMerge job: its effect value is the number of contributions it ran with.
func (m SQLMerge) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	if err := work(ctx, m.WorkMs); err != nil {
		return venturi.Outcome{}, err
	}
	return commitEffect(ctx, a, run, venturi.CompletedWith("ok"), "completed", 0, int64(len(m.Contrib)))
}

// SQLReplace is the SQL producer's kind with a merge SQL decides: a type without a Merge
// method, so a collision with a pending job of its key replaces that job's payload, in
// venturi_enqueue itself once a worker has registered the kind.
type SQLReplace struct {
	Key     string `json:"key"`
	Contrib string `json:"contrib"`
	WorkMs  int    `json:"work_ms"`
}

// Kind returns the SQL producer's replaced kind.
func (SQLReplace) Kind() string { return "chaos.sqlreplace" }

// DedupKey returns the job's key.
func (r SQLReplace) DedupKey() venturi.DedupKey { return venturi.DedupKey(r.Key) }

// Handle runs a SQLReplace job.
func (r SQLReplace) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	if err := work(ctx, r.WorkMs); err != nil {
		return venturi.Outcome{}, err
	}
	return commitEffect(ctx, a, run, venturi.CompletedWith("ok"), "completed", 0, 0)
}

// Slotted takes the slot Key with Limit under Policy (the slot, drop and replace
// scenarios). A replace job's handler stops as soon as a newer job of its slot asks it to
// (Run.Shutdown); the others ignore the signal, which otherwise comes only with a graceful
// stop of the worker, after the workload is done.
type Slotted struct {
	Seq    int64              `json:"seq"`
	Key    string             `json:"key"`
	Limit  int                `json:"limit"`
	Policy venturi.SlotPolicy `json:"policy"`
	WorkMs int                `json:"work_ms"`
}

// Kind returns the slotted jobs' kind.
func (Slotted) Kind() string { return "chaos.slot" }

// Slot returns the job's slot, as scripted in its payload.
func (s Slotted) Slot() venturi.Slot {
	return venturi.Slot{Key: s.Key, Limit: s.Limit, Policy: s.Policy}
}

// Capped is a job of a kind with a global concurrency limit. Its jobs carry a partition
// so that they are gated from their enqueue (see README.md, "Bugs found": the driver
// enqueues before any worker has recorded the kind's limits).
type Capped struct {
	Seq    int64  `json:"seq"`
	Part   string `json:"part"`
	WorkMs int    `json:"work_ms"`
}

// Kind returns the capped jobs' kind.
func (Capped) Kind() string { return "chaos.capped" }

// Partition returns the job's partition.
func (c Capped) Partition() string { return c.Part }

// Limits caps the kind at cappedConcurrency running jobs across all workers.
func (Capped) Limits() venturi.Limits { return venturi.Limits{Concurrency: cappedConcurrency} }

// Rated is a job of a kind with a rate per partition.
type Rated struct {
	Seq    int64  `json:"seq"`
	Part   string `json:"part"`
	WorkMs int    `json:"work_ms"`
}

// Kind returns the rated jobs' kind.
func (Rated) Kind() string { return "chaos.rated" }

// Partition returns the job's partition (tenant).
func (r Rated) Partition() string { return r.Part }

// Limits allows ratedN starts per ratedPer in each partition.
func (Rated) Limits() venturi.Limits {
	return venturi.Limits{Rate: venturi.Rate{N: ratedN, Per: ratedPer, PerPartition: true}}
}

// Queued is a plain job of limitedQueue, whose concurrency the driver limits.
type Queued struct {
	Seq    int64 `json:"seq"`
	WorkMs int   `json:"work_ms"`
}

// Kind returns the queued jobs' kind.
func (Queued) Kind() string { return "chaos.queued" }

// Queue returns limitedQueue.
func (Queued) Queue() string { return limitedQueue }

// App is the worker's shared state.
type App struct {
	Pool   *pgxpool.Pool
	Worker int // slot number (application_name chaos-worker-<n>)
	PID    int
	Ledger *ledger        // acknowledged commits, out of band (ledger.go); nil: none
	Queue  *venturi.Queue // for the members that add members to their batch (AddToBatchTx)
	Retain bool           // the retention schema's worker (wfdriver.go): reads record pruned upstreams
}

const transientNote = "scripted transient failure"
const permanentNote = "scripted permanent failure"

func uuidOf(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// recordStart writes the start row in its own autocommit statement, before any work.
func (a App) recordStart(ctx context.Context, id ulid.ULID, run int, token int64) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := a.Pool.Exec(cctx, `INSERT INTO chaos_start (job_id, run, token, worker, pid) VALUES ($1, $2, $3, $4, $5)`,
		uuidOf(id), run, token, a.Worker, a.PID)
	if err != nil {
		return fmt.Errorf("record start: %w", err)
	}
	return nil
}

// work simulates the handler's work; it honours cancellation.
func work(ctx context.Context, ms int) error {
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// commitEffect is transactional completion: the effect row and the run's outcome commit
// together, fenced by the run's token.
func commitEffect[C any](ctx context.Context, a App, run *venturi.Run[C], o venturi.Outcome, outcome string, counter int, value int64) (venturi.Outcome, error) {
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, fmt.Errorf("begin effect tx: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, `INSERT INTO chaos_effect (job_id, run, token, outcome, counter, value, pid)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, uuidOf(run.ID()), run.RunCount(), run.Token(), outcome, counter, value, a.PID); err != nil {
		return venturi.Outcome{}, fmt.Errorf("insert effect: %w", err)
	}
	if _, err := run.CompleteTx(ctx, tx, o); err != nil {
		if errors.Is(err, venturi.ErrLeaseLost) {
			return venturi.Outcome{}, err // rolled back by the deferred Rollback
		}
		return venturi.Outcome{}, fmt.Errorf("complete tx: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, fmt.Errorf("commit effect: %w", err)
	}
	a.Ledger.record(run.ID(), run.RunCount(), run.Token(), outcome)
	return o, nil
}

// Handle runs a scripted Job.
func (j Job) Handle(ctx context.Context, run *venturi.Run[Carry], a App) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	if err := work(ctx, j.WorkMs); err != nil {
		return venturi.Outcome{}, err
	}
	switch j.Scenario {
	case scTransient:
		if run.Failures() < j.Fails {
			return venturi.Outcome{}, errors.New(transientNote)
		}
		return commitEffect(ctx, a, run, venturi.CompletedWith("ok"), "completed", 0, int64(run.Failures()))
	case scPermanent:
		return venturi.Outcome{}, venturi.Permanent(errors.New(permanentNote))
	case scPause:
		c := run.Carry()
		if c.N < j.Pauses {
			*run.CarryMut() = Carry{N: c.N + 1}
			o, err := commitEffect(ctx, a, run, venturi.PauseInWith(time.Duration(j.Seq%3)*50*time.Millisecond, "scripted pause"), "paused", c.N+1, 0)
			if err != nil {
				run.SetCarry(c) // the pause did not commit: a failed run must not advance the counter
			}
			return o, err
		}
		return commitEffect(ctx, a, run, venturi.CompletedWith("ok"), "completed", c.N, 0)
	default:
		return commitEffect(ctx, a, run, venturi.CompletedWith("ok"), "completed", 0, 0)
	}
}

// Handle runs a Dedup job: its effect value is the (merged) Adds.
func (d Dedup) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	if err := work(ctx, d.WorkMs); err != nil {
		return venturi.Outcome{}, err
	}
	return commitEffect(ctx, a, run, venturi.CompletedWith("ok"), "completed", 0, int64(d.Adds))
}

// errStopped is what a replace job's handler returns when a newer job of its slot asks
// it to stop; venturi records the run as replaced.
var errStopped = errors.New("scripted stop: a newer job of the slot asked this run to stop")

// runFlow is the common script of the flow-controlled jobs: a start row, the work (cut
// short by stop when it is not nil), and transactional completion.
func runFlow[C any](ctx context.Context, run *venturi.Run[C], a App, workMs int, stop <-chan struct{}) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	t := time.NewTimer(time.Duration(workMs) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
		return venturi.Outcome{}, errStopped
	case <-ctx.Done():
		return venturi.Outcome{}, context.Cause(ctx)
	}
	return commitEffect(ctx, a, run, venturi.CompletedWith("ok"), "completed", 0, 0)
}

// Handle runs a Slotted job; a replace job stops when asked.
func (s Slotted) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	var stop <-chan struct{}
	if s.Policy == venturi.SlotReplace {
		stop = run.Shutdown()
	}
	return runFlow(ctx, run, a, s.WorkMs, stop)
}

// Handle runs a Capped job.
func (c Capped) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	return runFlow(ctx, run, a, c.WorkMs, nil)
}

// Handle runs a Rated job.
func (r Rated) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	return runFlow(ctx, run, a, r.WorkMs, nil)
}

// Handle runs a Queued job.
func (q Queued) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	return runFlow(ctx, run, a, q.WorkMs, nil)
}

// Stepped is a multi-step job: Steps memoized steps, each a venturi.StepTx whose effect
// row commits with its memo, with WorkMs of work after each step. A kill during that work
// cuts the run after a step's memo committed and before the next step began: the next run
// must skip the memoized steps. Each step's body first writes an execution row in its own
// autocommit statement, so every execution is on record whether or not its transaction
// commits; the step's result is the token of the run that executed it.
type Stepped struct {
	Seq    int64 `json:"seq"`
	Steps  int   `json:"steps"`
	WorkMs int   `json:"work_ms"`
}

// Kind returns the multi-step jobs' kind.
func (Stepped) Kind() string { return "chaos.steps" }

func stepName(i int) string { return fmt.Sprintf("step-%d", i) }

// Handle runs the steps; the completion's value is the sum of the steps' results (the
// memoized tokens), its counter the number of steps.
func (s Stepped) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	var sum int64
	for i := 1; i <= s.Steps; i++ {
		v, err := a.step(ctx, run, stepName(i))
		if err != nil {
			return venturi.Outcome{}, err
		}
		sum += v
		if err := work(ctx, s.WorkMs); err != nil { // the memo is committed, the next step not begun
			return venturi.Outcome{}, err
		}
	}
	return commitEffect(ctx, a, run, venturi.CompletedWith("ok"), "completed", s.Steps, sum)
}

// step runs one memoized step in a transaction of its own.
func (a App) step(ctx context.Context, run *venturi.Run[struct{}], name string) (int64, error) {
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin step tx: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	v, err := venturi.StepTx(ctx, run, tx, name, func(ctx context.Context, tx pgx.Tx) (int64, error) {
		// The execution, on record whatever becomes of tx (a second connection).
		if _, err := a.Pool.Exec(ctx, `INSERT INTO chaos_step_exec (job_id, step, run, token, pid) VALUES ($1, $2, $3, $4, $5)`,
			uuidOf(run.ID()), name, run.RunCount(), run.Token(), a.PID); err != nil {
			return 0, fmt.Errorf("record step execution: %w", err)
		}
		// The step's effect: it commits with the memo or not at all.
		if _, err := tx.Exec(ctx, `INSERT INTO chaos_step_effect (job_id, step, run, token, pid) VALUES ($1, $2, $3, $4, $5)`,
			uuidOf(run.ID()), name, run.RunCount(), run.Token(), a.PID); err != nil {
			return 0, fmt.Errorf("step effect: %w", err)
		}
		return run.Token(), nil
	})
	if err != nil {
		return 0, fmt.Errorf("step %s: %w", name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit step %s: %w", name, err)
	}
	return v, nil
}

// Waiter waits for waitSignal on its first undisturbed run (up to waitTimeout), then reads
// the signals that arrived and completes; the completion records each signal it read
// (chaos_sigread) in its transaction, and its counter is how many it read.
type Waiter struct {
	Seq    int64 `json:"seq"`
	WorkMs int   `json:"work_ms"`
}

// Kind returns the waiting jobs' kind.
func (Waiter) Kind() string { return "chaos.wait" }

// Handle waits, or reads the signals and completes.
func (w Waiter) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	if err := work(ctx, w.WorkMs); err != nil {
		return venturi.Outcome{}, err
	}
	names, waited := run.Waited()
	if !waited {
		return venturi.WaitForSignal(waitTimeout, waitSignal), nil
	}
	sigs, err := run.Signals(ctx, names...)
	if err != nil {
		return venturi.Outcome{}, err
	}
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, fmt.Errorf("begin effect tx: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	for _, s := range sigs {
		if _, err := tx.Exec(ctx, `INSERT INTO chaos_sigread (job_id, run, token, seq, delivery_id) VALUES ($1, $2, $3, $4, $5)`,
			uuidOf(run.ID()), run.RunCount(), run.Token(), s.Seq, s.DeliveryID); err != nil {
			return venturi.Outcome{}, fmt.Errorf("record signal read: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO chaos_effect (job_id, run, token, outcome, counter, value, pid)
		VALUES ($1, $2, $3, 'completed', $4, 0, $5)`, uuidOf(run.ID()), run.RunCount(), run.Token(), len(sigs), a.PID); err != nil {
		return venturi.Outcome{}, fmt.Errorf("insert effect: %w", err)
	}
	o := venturi.CompletedWith(fmt.Sprintf("read %d signal(s)", len(sigs)))
	if _, err := run.CompleteTx(ctx, tx, o); err != nil {
		return venturi.Outcome{}, err // ErrLeaseLost: rolled back by the deferred Rollback
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, fmt.Errorf("commit effect: %w", err)
	}
	a.Ledger.record(run.ID(), run.RunCount(), run.Token(), "completed")
	return o, nil
}
