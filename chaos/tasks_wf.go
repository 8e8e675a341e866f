package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// Workflows, batches and chunks (wfdriver.go scripts them, wfcheck.go and chunkcheck.go
// check them).
const (
	scWorkflow = "workflow" // a member of a scripted workflow (WfTask)
	scBatch    = "batch"    // a member of a batch (WfTask)
	scCallback = "callback" // a batch's callback (WfCallback)
	scSpawned  = "spawned"  // a node a member spawned, or a member a member added to its batch
	scChunk    = "chunk"    // a ChunkJob: handled in chunks, under a kind concurrency limit
)

// isWfScenario reports whether a scenario's jobs are workflow members.
func isWfScenario(sc string) bool {
	return sc == scWorkflow || sc == scBatch || sc == scCallback || sc == scSpawned
}

// The scripts of a WfTask.
const (
	wfOK        = "ok"        // completes
	wfTransient = "transient" // fails (retryably) while Failures() < Fails, then completes
	wfPermanent = "permanent" // dead
	wfOnce      = "once"      // dead until the driver retries its workflow (chaos_wf_op), then completes
)

// The chunk scenario's limits: a kind concurrency, so a chunk holds at most that many jobs.
const (
	chunkConcurrency = 4
	chunkSize        = 4
	chunkLinger      = 30 * time.Millisecond
	chunkPanicNote   = "panic: scripted chunk panic"
)

// The chunk scenario's per-item scripts (ChunkJob.Set).
const (
	chunkOK        = "ok"        // Complete, through CompleteTx with its effect
	chunkFail      = "fail"      // Fail(Permanent): dead
	chunkTransient = "transient" // Fail(transient) on its first run, then as chunkOK
	chunkUnset     = "unset"     // left unset: completes when the handler returns nil, fails with its panic
)

// wfOutput is every member's output (Run.SetOutput): the token of the run that completed it.
type wfOutput struct {
	Token int64  `json:"token"`
	Job   string `json:"job"`
}

// WfChild is a node a WfTask spawns when it completes: named after its spawner
// ("n3/c0"), scripted, and needing the sibling Needs ("" none).
type WfChild struct {
	Name   string `json:"name"`
	Script string `json:"script"`
	Needs  string `json:"needs,omitempty"`
}

// WfTask is a member of a workflow or a batch. It reads the outputs upstream of it
// (recorded in chaos_wf_read), works, follows its script, and completes through
// transactional completion with its output, spawning Spawn, and adding Adds members to
// its batch (AddToBatchTx) while the batch is open.
type WfTask struct {
	Seq     int64     `json:"seq"`
	Script  string    `json:"script"`
	Fails   int       `json:"fails,omitempty"`
	WorkMs  int       `json:"work_ms"`
	Spawner bool      `json:"spawner,omitempty"` // spawns Spawn (none when empty) when it completes
	Spawn   []WfChild `json:"spawn,omitempty"`
	Adds    int       `json:"adds,omitempty"`
}

// Kind returns the workflow members' kind.
func (WfTask) Kind() string { return "chaos.wf" }

// WfCallback is a batch's callback (Which: on_success, on_end, on_failure). It records the
// batch's counts as it reads them (Run.Batch) in its completion's transaction.
type WfCallback struct {
	Seq    int64  `json:"seq"`
	Which  string `json:"which"`
	WorkMs int    `json:"work_ms"`
}

// Kind returns the callbacks' kind.
func (WfCallback) Kind() string { return "chaos.cb" }

// ChunkJob is a job of the chunked kind: handled with up to chunkSize others of its
// partition at once, with the per-item outcome Set, and a panic of the whole call when
// Panic is set (on the item's first run).
type ChunkJob struct {
	Seq    int64  `json:"seq"`
	Part   string `json:"part"`
	Set    string `json:"set"`
	Panic  bool   `json:"panic,omitempty"`
	WorkMs int    `json:"work_ms"`
}

// Kind returns the chunked kind.
func (ChunkJob) Kind() string { return "chaos.chunk" }

// Partition returns the job's partition: it is gated from its enqueue, and a chunk holds
// jobs of one partition.
func (c ChunkJob) Partition() string { return c.Part }

// Limits caps the kind at chunkConcurrency running jobs (chunk items) across all workers.
func (ChunkJob) Limits() venturi.Limits { return venturi.Limits{Concurrency: chunkConcurrency} }

// errWfStopped is what a member returns when it is asked to stop (its workflow is being
// cancelled); venturi ends the run cancelled.
var errWfStopped = errors.New("scripted stop: the member was asked to stop")

// wfWork works for ms, or until the run is asked to stop or its context ends.
func wfWork[C any](ctx context.Context, run *venturi.Run[C], ms int) error {
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-run.Shutdown():
		return errWfStopped
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// recordReads reads the outputs upstream of the run (Run.UpstreamOutputs) and records
// each with the token it holds, and a marker row (node "") saying the read was done, in
// one autocommit statement. In the retention schema it also records which of those
// nodes' jobs were already pruned.
func (a App) recordReads(ctx context.Context, run *venturi.Run[struct{}], wf ulid.ULID) error {
	outs, err := run.UpstreamOutputs(ctx)
	if err != nil {
		return fmt.Errorf("upstream outputs: %w", err)
	}
	nodes, toks, pruned := []string{""}, []int64{0}, []bool{false}
	for n, raw := range outs {
		var o wfOutput
		if err := json.Unmarshal(raw, &o); err != nil {
			return fmt.Errorf("output of %s: %w", n, err)
		}
		nodes, toks, pruned = append(nodes, n), append(toks, o.Token), append(pruned, false)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if a.Retain && len(nodes) > 1 {
		rows, err := a.Pool.Query(cctx, `SELECT n.node FROM venturi_workflow_node n
			WHERE n.workflow_id = $1 AND n.node = ANY($2) AND n.job_id IS NOT NULL
			  AND NOT EXISTS (SELECT 1 FROM venturi_job_all j WHERE j.id = n.job_id)`, uuidOf(wf), nodes[1:])
		if err != nil {
			return fmt.Errorf("pruned upstream: %w", err)
		}
		gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("pruned upstream: %w", err)
		}
		for i, n := range nodes {
			for _, g := range gone {
				pruned[i] = pruned[i] || n == g
			}
		}
	}
	_, err = a.Pool.Exec(cctx, `INSERT INTO chaos_wf_read (job_id, run, token, node, out_token, pruned)
		SELECT $1, $2, $3, u.node, u.tok, u.pruned FROM unnest($4::text[], $5::bigint[], $6::bool[]) AS u(node, tok, pruned)`,
		uuidOf(run.ID()), run.RunCount(), run.Token(), nodes, toks, pruned)
	if err != nil {
		return fmt.Errorf("record reads: %w", err)
	}
	return nil
}

// wfRetried reports whether the driver retried workflow wf (it records the retry before it
// asks for it).
func (a App) wfRetried(ctx context.Context, wf ulid.ULID) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var ok bool
	err := a.Pool.QueryRow(cctx, `SELECT EXISTS (SELECT 1 FROM chaos_wf_op WHERE wf_id = $1 AND op = 'retry')`, uuidOf(wf)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read the workflow's retries: %w", err)
	}
	return ok, nil
}

// Handle runs a workflow or batch member.
func (t WfTask) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	wf, node, err := run.Workflow(ctx)
	if err != nil {
		return venturi.Outcome{}, fmt.Errorf("the run's workflow: %w", err)
	}
	if err := a.recordReads(ctx, run, wf); err != nil {
		return venturi.Outcome{}, err
	}
	if err := wfWork(ctx, run, t.WorkMs); err != nil {
		return venturi.Outcome{}, err
	}
	switch t.Script {
	case wfTransient:
		if run.Failures() < t.Fails {
			return venturi.Outcome{}, errors.New(transientNote)
		}
	case wfPermanent:
		return venturi.Outcome{}, venturi.Permanent(errors.New(permanentNote))
	case wfOnce:
		retried, err := a.wfRetried(ctx, wf)
		if err != nil {
			return venturi.Outcome{}, err
		}
		if !retried {
			return venturi.Outcome{}, venturi.Permanent(errors.New(permanentNote))
		}
	}
	if err := run.SetOutput(wfOutput{Token: run.Token(), Job: run.ID().String()}); err != nil {
		return venturi.Outcome{}, err
	}
	var spawned map[string]ulid.ULID
	if t.Spawner && len(t.Spawn) > 0 {
		w := venturi.NewWorkflow("")
		byName := map[string]venturi.Node{}
		for _, c := range t.Spawn {
			var opts []venturi.NodeOption
			if c.Needs != "" {
				opts = append(opts, venturi.Needs(byName[c.Needs]))
			}
			byName[c.Name] = w.Add(c.Name, WfTask{Seq: t.Seq, Script: c.Script, WorkMs: t.WorkMs}, opts...)
		}
		if spawned, err = run.Spawn(ctx, w); err != nil {
			return venturi.Outcome{}, fmt.Errorf("spawn: %w", err)
		}
	}
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, fmt.Errorf("begin effect tx: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, `INSERT INTO chaos_effect (job_id, run, token, outcome, counter, value, pid)
		VALUES ($1, $2, $3, 'completed', 0, $3, $4)`, uuidOf(run.ID()), run.RunCount(), run.Token(), a.PID); err != nil {
		return venturi.Outcome{}, fmt.Errorf("insert effect: %w", err)
	}
	for _, c := range t.Spawn {
		full := node + "/" + c.Name
		if err := a.recordSpawn(ctx, tx, run, "spawn", full, spawned[full], c.Script); err != nil {
			return venturi.Outcome{}, err
		}
	}
	if t.Adds > 0 {
		tasks := make([]venturi.Task, t.Adds)
		for i := range tasks {
			tasks[i] = WfTask{Seq: t.Seq, Script: wfOK, WorkMs: t.WorkMs}
		}
		ids, err := a.Queue.AddToBatchTx(ctx, tx, wf, tasks...)
		switch {
		case errors.Is(err, venturi.ErrWorkflowFinished): // sealed (or cancelled) meanwhile: nothing to add
		case err != nil:
			return venturi.Outcome{}, fmt.Errorf("add to the batch: %w", err)
		}
		for _, id := range ids {
			if err := a.recordSpawn(ctx, tx, run, "add", id.String(), id, wfOK); err != nil {
				return venturi.Outcome{}, err
			}
		}
	}
	o := venturi.CompletedWith("ok")
	if _, err := run.CompleteTx(ctx, tx, o); err != nil {
		if errors.Is(err, venturi.ErrLeaseLost) {
			return venturi.Outcome{}, err
		}
		return venturi.Outcome{}, fmt.Errorf("complete tx: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, fmt.Errorf("commit effect: %w", err)
	}
	a.Ledger.record(run.ID(), run.RunCount(), run.Token(), "completed")
	return o, nil
}

// recordSpawn records, in the completion's transaction, a node the run spawned or a
// member it added to its batch.
func (a App) recordSpawn(ctx context.Context, tx pgx.Tx, run *venturi.Run[struct{}], kind, node string, child ulid.ULID, script string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO chaos_spawn (job_id, run, token, kind, node, child, script) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		uuidOf(run.ID()), run.RunCount(), run.Token(), kind, node, uuidOf(child), script); err != nil {
		return fmt.Errorf("record %s: %w", kind, err)
	}
	return nil
}

// Handle runs a batch's callback: it reads the members' outputs and the batch's counts,
// works, and completes with the counts recorded.
func (c WfCallback) Handle(ctx context.Context, run *venturi.Run[struct{}], a App) (venturi.Outcome, error) {
	if err := a.recordStart(ctx, run.ID(), run.RunCount(), run.Token()); err != nil {
		return venturi.Outcome{}, err
	}
	wf, _, err := run.Workflow(ctx)
	if err != nil {
		return venturi.Outcome{}, fmt.Errorf("the run's batch: %w", err)
	}
	if err := a.recordReads(ctx, run, wf); err != nil {
		return venturi.Outcome{}, err
	}
	info, err := run.Batch(ctx)
	if err != nil {
		return venturi.Outcome{}, fmt.Errorf("batch counts: %w", err)
	}
	if err := wfWork(ctx, run, c.WorkMs); err != nil {
		return venturi.Outcome{}, err
	}
	if err := run.SetOutput(wfOutput{Token: run.Token(), Job: run.ID().String()}); err != nil {
		return venturi.Outcome{}, err
	}
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, fmt.Errorf("begin effect tx: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, `INSERT INTO chaos_effect (job_id, run, token, outcome, counter, value, pid)
		VALUES ($1, $2, $3, 'completed', 0, $3, $4)`, uuidOf(run.ID()), run.RunCount(), run.Token(), a.PID); err != nil {
		return venturi.Outcome{}, fmt.Errorf("insert effect: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO chaos_cb (job_id, run, token, which, total, succeeded, failed, cancelled, pending)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, uuidOf(run.ID()), run.RunCount(), run.Token(), c.Which,
		info.Total, info.Succeeded, info.Failed, info.Cancelled, info.Pending); err != nil {
		return venturi.Outcome{}, fmt.Errorf("record the counts: %w", err)
	}
	o := venturi.CompletedWith("ok")
	if _, err := run.CompleteTx(ctx, tx, o); err != nil {
		if errors.Is(err, venturi.ErrLeaseLost) {
			return venturi.Outcome{}, err
		}
		return venturi.Outcome{}, fmt.Errorf("complete tx: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, fmt.Errorf("commit effect: %w", err)
	}
	a.Ledger.record(run.ID(), run.RunCount(), run.Token(), "completed")
	return o, nil
}

// handleChunk is the chunked kind's handler. Each item gets a start row; after the work,
// the call records what it gives each item (chaos_chunk_item: the call, the item's run
// and token, what is set, whether the call panics) in one autocommit statement, then gives
// it: ok completes the item through CompleteTx with its effect, fail and transient fail it
// (permanently, retryably), unset leaves it to the call's result. The call panics when an
// item scripted to panic is on its first run: every unset item must fail with the panic.
func handleChunk(ctx context.Context, items []*venturi.ChunkItem[ChunkJob, struct{}], a App) error {
	workMs := 0
	for _, it := range items {
		if err := a.recordStart(ctx, it.Run.ID(), it.Run.RunCount(), it.Run.Token()); err != nil {
			return err
		}
		workMs = max(workMs, it.Task.WorkMs)
	}
	if err := work(ctx, workMs); err != nil {
		return err
	}
	panicNow := false
	sets := make([]string, len(items))
	for i, it := range items {
		panicNow = panicNow || (it.Task.Panic && it.Run.Failures() == 0)
		sets[i] = it.Task.Set
		if sets[i] == chunkTransient && it.Run.Failures() > 0 {
			sets[i] = chunkOK
		}
	}
	call := ulid.Make().String()
	ids, runs, tokens := make([]pgtype.UUID, len(items)), make([]int32, len(items)), make([]int64, len(items))
	for i, it := range items {
		ids[i], runs[i], tokens[i] = uuidOf(it.Run.ID()), int32(it.Run.RunCount()), it.Run.Token()
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := a.Pool.Exec(cctx, `INSERT INTO chaos_chunk_item (call, job_id, run, token, size, set, panic)
		SELECT $1, u.id, u.run, u.token, $5, u.set, $6 FROM unnest($2::uuid[], $3::int[], $4::bigint[], $7::text[]) AS u(id, run, token, set)`,
		call, ids, runs, tokens, len(items), panicNow, sets)
	cancel()
	if err != nil {
		return fmt.Errorf("record the chunk: %w", err)
	}
	for i, it := range items {
		switch sets[i] {
		case chunkOK:
			o, err := commitEffect(ctx, a, it.Run, venturi.CompletedWith("ok"), "completed", 0, it.Run.Token())
			it.Set(o, err)
		case chunkFail:
			it.Fail(venturi.Permanent(errors.New(permanentNote)))
		case chunkTransient:
			it.Fail(errors.New(transientNote))
		}
	}
	if panicNow {
		panic(chunkPanicNote[len("panic: "):])
	}
	return nil
}
