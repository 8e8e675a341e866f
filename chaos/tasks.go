package main

import (
	"context"
	"errors"
	"fmt"
	"time"

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
func (d Dedup) DedupKey() venturi.DedupKey { return venturi.DedupKey(d.Key) }
func (d Dedup) Merge(existing venturi.Pending[Dedup, struct{}]) venturi.Merge[Dedup, struct{}] {
	if d.Indep {
		return existing.Independent()
	}
	return existing.With(Dedup{Key: d.Key, Adds: existing.Payload.Adds + d.Adds, WorkMs: existing.Payload.WorkMs}, existing.Carry)
}

// App is the worker's shared state.
type App struct {
	Pool   *pgxpool.Pool
	Worker int // slot number (application_name chaos-worker-<n>)
	PID    int
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
